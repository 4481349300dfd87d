"""What feeds the loop besides the NVML snapshot: XID and node-change wake-ups, the fabric readings."""
