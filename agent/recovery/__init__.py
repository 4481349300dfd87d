"""The recovery loop on the node itself: GPU reset, reboot request, validation (docs/recovery.md).

Recovery actions are node-local — a command run without a shell, kured's sentinel file, the boot id — so
they live in the agent, not in an orchestrator executor: :class:`agent.recovery.executor.RecoveringExecutor`
wraps the orchestrator's executor and sends the ``Reset`` / ``Reboot`` / ``WithdrawReboot`` / ``Validate``
steps to :class:`agent.recovery.executor.LocalRecovery`, which acts through
:class:`agent.recovery.actions.NodeActions` (the real node's commands and files, or a simulated node's
in-process fakes) and runs the validation's diagnostic on a thread of its own. The rules that plan them are
pure (``remediation/plan/recovery.py``); :func:`agent.recovery.settle.settle_recovery` folds their results
into the planner's memory and the state machine (testing, or escalation to ``replace``).
"""
