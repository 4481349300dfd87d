"""The Nomad executor: the same job as ``remediation.kubernetes`` on a Nomad client node, module for module.

Dynamic node metadata stands in for the condition, label and annotations, eligibility for the taint and the
cordon; the drain keeps system jobs; batch training jobs are restarted by stopping all their allocations.
Only ``remediation.nomad.api`` imports python-nomad. This package file stays empty so that
``remediation.nomad.settings`` loads no client code.
"""
