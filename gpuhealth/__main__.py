"""``python -m gpuhealth``: the same command line as the ``gpuhealth`` console script."""

from gpuhealth.cli.main import main

raise SystemExit(main())
