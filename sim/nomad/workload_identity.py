"""Nomad workload identities, as the servers sign them: a JWT per task (ES256), verifiable against the
keys the servers publish at ``/.well-known/jwks.json``.

The claims are Nomad's: ``nomad_namespace``, ``nomad_job_id``, ``nomad_allocation_id``, ``nomad_task``, with
``aud`` the audience the job's ``identity`` block asked for. The allocation says which node the task runs on.
"""

from __future__ import annotations

import time
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

KEY_ID = "nomad-sim-1"


class WorkloadIdentities:
    """The region's signing key and the tokens it issues."""

    def __init__(self) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> dict[str, Any]:
        """The public keys, as ``/.well-known/jwks.json`` serves them."""
        jwk = ECAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        return {"keys": [{**jwk, "kid": KEY_ID, "alg": "ES256", "use": "sig"}]}

    def issue(
        self,
        allocation: dict[str, Any],
        *,
        task: str,
        audience: str,
        ttl_s: float = 3600.0,
        now: float | None = None,
        key: ec.EllipticCurvePrivateKey | None = None,
    ) -> str:
        """The identity of ``task`` in ``allocation`` (``key``: sign with another key, as a forger would)."""
        issued = int(time.time() if now is None else now)
        namespace, job = allocation["Namespace"], allocation["JobID"]
        claims = {
            "nomad_namespace": namespace,
            "nomad_job_id": job,
            "nomad_allocation_id": allocation["ID"],
            "nomad_task": task,
            "sub": f"global:{namespace}:{job}:{allocation.get('TaskGroup', '')}:{task}",
            "aud": audience,
            "iat": issued,
            "nbf": issued,
            "exp": issued + int(ttl_s),
        }
        return jwt.encode(claims, key or self._key, algorithm="ES256", headers={"kid": KEY_ID})
