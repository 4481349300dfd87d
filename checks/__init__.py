"""Pure health checks: functions from a node snapshot to findings. No I/O, no backends, no clients."""
