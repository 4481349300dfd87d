"""A real Kubernetes stack on this machine, from binaries built by ``tools/build-control-plane.sh``.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK and the JobSet, Kueue and Trainer
managers on loopback (``control_plane``, ``stack``), KWOK GPU nodes (``nodes``), server-side apply of their
manifests (``apply``) and the throw-away CA they trust (``certificates``). The realkube tests start it
through ``tests/support``; ``gpuhealth demo --cluster real`` plays a scenario on it
(``sim.scenario.real_orchestrator``). Nothing here reaches past loopback.
"""
