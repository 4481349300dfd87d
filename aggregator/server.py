"""Run the aggregator service under uvicorn (``gpuhealth aggregator`` and ``python -m aggregator``).

With ``tls_cert_file`` and ``tls_key_file`` it serves HTTPS; with ``tls_client_ca_file`` too, every client
must present a certificate that CA signed (the handshake fails otherwise, before any request is read).
The files are tried here first, so a wrong path or a key that does not match its certificate is one line
at start, not a traceback from inside uvicorn.
"""

from __future__ import annotations

import errno
import gc
import socket
import ssl
from collections.abc import Callable
from typing import Any

import uvicorn

from aggregator.app import create_app
from aggregator.header_limits import bounded_head_protocol
from aggregator.settings import AggregatorSettings
from core.settings import SettingsError


def serve(settings: AggregatorSettings, announce: Callable[[str], None] | None = None) -> None:
    """Open (and migrate) the database, then serve until SIGINT / SIGTERM; ``announce`` is given one line
    saying where it listens and which database it uses, once both are open."""
    options = serving_options(settings)  # before the database: a bad certificate is a configuration error
    listener = listen_socket(settings.host, settings.port)  # a port in use: one line, before the database
    try:
        app = create_app(settings)
        gc.freeze()  # start-up objects (models, routes, SQL metadata) never die: keep full collections short
        config = uvicorn.Config(app, log_level="warning", access_log=False, **options)
        server = uvicorn.Server(config)
        if announce is not None:
            scheme = "https" if "ssl_certfile" in options else "http"
            host = f"[{settings.host}]" if ":" in settings.host else settings.host
            announce(
                f"gpuhealth aggregator listening on {scheme}://{host}:{listener.getsockname()[1]}, "
                f"database {database_shown(settings)}"
            )
        server.run(sockets=[listener])
    finally:
        listener.close()


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` and listening; raises SettingsError with one line when the
    address is in use or cannot be had."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        listener = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise SettingsError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        why = "the address is in use (another aggregator?)" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise SettingsError(f"cannot listen on {host}:{port}: {why or exc}") from None
    listener.set_inheritable(True)
    return listener


def database_shown(settings: AggregatorSettings) -> str:
    """The database, for a person to read: a SQLite file's path, or a server's host and database name
    (never the user or password: the URL is a secret)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(settings.database_url.get_secret_value())
    except ArgumentError:
        return "(an unreadable URL)"
    if url.get_backend_name() == "sqlite":
        return f"SQLite {url.database or ':memory:'}"
    where = f"{url.host or 'localhost'}{f':{url.port}' if url.port else ''}"
    return f"PostgreSQL {url.database or ''} on {where}".replace("  ", " ")


def serving_options(settings: AggregatorSettings) -> dict[str, Any]:
    """uvicorn's keyword arguments for these settings: TLS (:func:`tls_options`), the bounds on a request's
    head, read before any authentication (aggregator/header_limits.py), and which proxies are believed."""
    return {
        **tls_options(settings),
        "http": bounded_head_protocol(settings.max_header_bytes, settings.max_headers),
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        # uvicorn believes X-Forwarded-For from loopback by default: then whoever shares the host could
        # put any address in the audit log. Only the proxies named in trusted_proxies are believed.
        "proxy_headers": bool(settings.trusted_proxies),
        "forwarded_allow_ips": list(settings.trusted_proxies),
    }


def tls_options(settings: AggregatorSettings) -> dict[str, Any]:
    """uvicorn's TLS keyword arguments for these settings (none for plain HTTP); raises SettingsError
    naming the file when a certificate, key or CA cannot be loaded."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return {}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(
            f"cannot load tls_cert_file {settings.tls_cert_file} with tls_key_file {settings.tls_key_file}: "
            f"{_reason(exc)}"
        ) from None
    options: dict[str, Any] = {
        "ssl_certfile": str(settings.tls_cert_file),
        "ssl_keyfile": str(settings.tls_key_file),
    }
    if settings.tls_client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=settings.tls_client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(
                f"cannot load tls_client_ca_file {settings.tls_client_ca_file}: {_reason(exc)}"
            ) from None
        options["ssl_ca_certs"] = str(settings.tls_client_ca_file)
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    return options


def _reason(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc).lower().replace("_", " ")
    return str(exc.strerror or exc)
