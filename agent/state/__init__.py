"""The node's debounced health: the state machine, its state file, and the resume after a lost file."""
