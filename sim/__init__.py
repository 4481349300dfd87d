"""Emulated orchestrator APIs over real HTTP, simulated GPU nodes and fault injection.

Shipped with the package: ``gpuhealth demo``, the scenario tests and the benchmarks run on it.
"""
