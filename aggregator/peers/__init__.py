"""Peer comparison: each GPU against the GPUs of the same model and driver across the fleet."""
