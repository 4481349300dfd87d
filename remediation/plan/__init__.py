"""The pure planner: verdict + policy + node facts -> plan steps (node, per-GPU scope, recovery)."""
