"""Replay of recorded fleet history through a candidate configuration (docs/replay.md)."""
