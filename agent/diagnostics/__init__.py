"""Deep diagnostics on the node: ``dcgmi diag`` runs on a schedule or on a human's request."""
