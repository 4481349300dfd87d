"""Scenarios of ``gpuhealth demo``: a fleet, its workloads, timed faults and the expectations to check."""
