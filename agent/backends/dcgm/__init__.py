"""DCGM readings: dcgm-exporter's /metrics page and the ``dcgmi`` command (readings only, never judgement)."""
