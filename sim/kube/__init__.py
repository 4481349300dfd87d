"""An emulated Kubernetes API server (``sim/kube``), faithful to the documented API semantics."""
