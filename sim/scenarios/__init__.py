"""The scenarios shipped with gpuhealth (YAML, format ``gpuhealth.scenario/v1``; see docs/scenarios.md)."""
