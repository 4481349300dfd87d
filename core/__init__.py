"""The vocabulary every layer shares, and nothing else: the node snapshot (format v1), findings and the
verdict, the node's debounced health and its states, plan steps and the planner's memory, the aggregator's
and the alerts' wire models, the clock, and the logging set-up.

Modules here import pydantic, structlog and each other only, so any layer may use them without pulling in a
backend, an orchestrator client or a web framework.
"""
