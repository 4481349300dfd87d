"""An emulated Nomad HTTP API (``sim/nomad``) for python-nomad, following the documented API semantics."""
