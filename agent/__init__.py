"""The per-node agent: GPU backends, the snapshot model, and (later) the state machine and loop."""
