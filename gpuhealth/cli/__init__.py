"""The ``gpuhealth`` command line: one console script, one module per command group."""
