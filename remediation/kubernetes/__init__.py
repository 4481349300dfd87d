"""The Kubernetes executor: the only gpuhealth code (besides ``sim/`` and tests) that imports ``kubernetes``.

It applies plan steps (``core.steps``) to one Node — the ``GPUHealthy`` condition, the
``gpuhealth.io/state`` label, the ``gpuhealth.io/unhealthy`` taint, cordon, annotations, Events — keeps a
watch of that Node so the agent loop sees drift and human changes without polling, drains it through the
Eviction API and requeues the training jobs that ran there. Import the modules themselves: this package
file stays empty so that ``remediation.kubernetes.settings`` loads no client code.
"""
