"""HMAC-SHA256 signatures of generic webhook deliveries (docs/alerts.md shows a receiver's check).

The signed message is ``<timestamp>.<body>``: the Unix time in seconds (the ``X-Gpuhealth-Timestamp``
header), a dot, and the exact request body bytes. The signature header is ``v1=<hex digest>``. Signing the
timestamp lets a receiver refuse a replayed delivery whose timestamp is too old.
"""

from __future__ import annotations

import hashlib
import hmac

TIMESTAMP_HEADER = "X-Gpuhealth-Timestamp"
SIGNATURE_HEADER = "X-Gpuhealth-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
SCHEME = "v1"


class SignatureError(ValueError):
    """A webhook delivery's signature is missing, wrong or too old."""


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``X-Gpuhealth-Signature`` value for this body sent at ``timestamp``."""
    digest = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"{SCHEME}={digest}"


def verify(
    secret: bytes,
    timestamp_header: str,
    signature_header: str,
    body: bytes,
    *,
    now: float,
    tolerance_s: float = 300.0,
) -> None:
    """Raise :class:`SignatureError` unless the signature matches and the timestamp is within tolerance."""
    try:
        timestamp = int(timestamp_header)
    except ValueError as exc:
        raise SignatureError("timestamp header is not an integer") from exc
    if abs(now - timestamp) > tolerance_s:
        raise SignatureError("timestamp outside the tolerance: stale or replayed delivery")
    if not hmac.compare_digest(sign(secret, timestamp, body), signature_header):
        raise SignatureError("signature does not match")
