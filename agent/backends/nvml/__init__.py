"""NVML: the seam (the only pynvml importer), the backend and reader, the XID watcher, the diagnostic tool."""
