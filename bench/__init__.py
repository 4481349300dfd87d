"""Benchmarks of gpuhealth's own overhead; each runs as ``python -m bench.<name> [--quick] --json``."""
