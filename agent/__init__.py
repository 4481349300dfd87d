"""The per-node agent: GPU backends, the state machine, the loop and its wiring, diagnostics and recovery."""
