"""The simulator's commands, added to the ``gpuhealth`` command line: ``demo`` and ``sim``."""
