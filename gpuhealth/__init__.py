"""gpuhealth's own package for what the design card leaves unnamed: the shared vocabulary every layer uses
(``core``), the ``gpuhealth`` command line (``gpuhealth.cli``) and the JSON Schema generator
(``gpuhealth.schemas``). The layers themselves are the top-level packages ``agent``, ``remediation``,
``checks``, ``aggregator`` and ``sim`` (docs/architecture.md).
"""
