"""Stateful fakes at the product's hardware seams: NVML (GPUs, profiles, structures) and the InfiniBand sysfs
tree."""
