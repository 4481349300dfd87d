"""A real OpenID Connect issuer on 127.0.0.1 for the OIDC tests: a discovery document, its JWKS, and ID
tokens signed with its RSA key (or with another key, as a forger would)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.aggregator.postgres import free_port

KEY_ID = "test-issuer-1"


class OidcIssuer:
    """Serves ``/.well-known/openid-configuration`` and ``/jwks`` once started."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._server: ThreadingHTTPServer | None = None

    def documents(self) -> dict[str, Any]:
        jwk = RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        return {
            "/.well-known/openid-configuration": {"issuer": self.url, "jwks_uri": f"{self.url}/jwks"},
            "/jwks": {"keys": [{**jwk, "kid": KEY_ID, "alg": "RS256", "use": "sig"}]},
        }

    def start(self) -> OidcIssuer:
        documents = self.documents()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = documents.get(self.path)
                payload = json.dumps(body).encode()
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def id_token(
        self,
        email: str,
        groups: list[str],
        *,
        audience: str = "gpuhealth",
        issuer: str | None = None,
        expires_in_s: int = 3600,
        forged: bool = False,
    ) -> str:
        now = int(time.time())
        claims = {
            "iss": issuer or self.url,
            "aud": audience,
            "sub": email,
            "email": email,
            "groups": groups,
            "iat": now,
            "exp": now + expires_in_s,
        }
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if forged else self._key
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": KEY_ID})
