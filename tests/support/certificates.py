"""Throw-away keys and certificates for tests: the CA of ``sim.realkube.certificates`` (the real stack's,
which the demo on the real stack uses too), and :func:`write_tls_files`, a set of them as PEM files for the
aggregator's TLS tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.realkube.certificates import CertificateAuthority, new_key, pem_of_key

__all__ = ["CertificateAuthority", "TlsFiles", "new_key", "pem_of_key", "write_tls_files"]


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one CA, a loopback server certificate and a client certificate it issued."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def write_tls_files(directory: Path, ca: CertificateAuthority | None = None) -> TlsFiles:
    """A CA (new unless given) and its server and client certificates, written under ``directory``."""
    authority = ca or CertificateAuthority.create()
    directory.mkdir(parents=True, exist_ok=True)
    server_cert, server_key = authority.issue("gpuhealth-aggregator", server=True)
    client_cert, client_key = authority.issue("oncall")
    files = TlsFiles(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server-key.pem",
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
    )
    for path, data in (
        (files.ca, authority.pem()),
        (files.server_cert, server_cert),
        (files.server_key, server_key),
        (files.client_cert, client_cert),
        (files.client_key, client_key),
    ):
        path.write_bytes(data)
    return files
