"""Pages of long lists: a ``limit`` and an opaque ``continue`` token, the next page announced in a ``Link``
header (``rel="next"``, RFC 8288) so the body of a list stays a plain JSON list for every client.

The token is the position after the page's last item (a node name, or an event's time and id), encoded so a
client treats it as opaque; a token that does not decode is a 422 naming the parameter, like any bad query.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import urlencode

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError

MAX_TOKEN_CHARS = 512


def encode_token(position: list[Any]) -> str:
    """An opaque continue token for ``position`` (JSON scalars)."""
    return base64.urlsafe_b64encode(json.dumps(position, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_token(token: str | None) -> list[Any] | None:
    """The position a continue token holds; None for no token. Raises a 422 for a token that is not ours."""
    if token is None:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        position = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        position = None
    if not isinstance(position, list) or not position:
        error = {
            "type": "value_error",
            "loc": ("query", "continue"),
            "msg": "not a continue token",
            "input": token,
        }
        raise RequestValidationError([error])
    return position


def announce_next(request: Request, response: Response, position: list[Any] | None) -> None:
    """Set ``Link: <url>; rel="next"`` for the page after ``position`` (none when the list ended)."""
    if position is None:
        return
    params = {key: value for key, value in request.query_params.items() if key != "continue"}
    params["continue"] = encode_token(position)
    response.headers["Link"] = f'<{request.url.path}?{urlencode(params)}>; rel="next"'
