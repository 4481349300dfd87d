"""Pages of long lists: a ``limit`` and an opaque ``continue`` token, the next page announced in a ``Link``
header (``rel="next"``, RFC 8288) so the body of a list stays a plain JSON list for every client.

The token is the position after the page's last item (a node name, or an event's time and id), encoded so a
client treats it as opaque. A token is input like any other: every field is decoded and bounded (a node
name by its pattern, a time as an aware ISO time, an id as a positive 63-bit integer, text as UTF-8 that can
be written), and a token that is not ours is a 400 naming the parameter, never a database error.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import HTTPException, Request, Response, status

from core.aggregator_api import NODE_NAME_PATTERN

MAX_TOKEN_CHARS = 512
MAX_ID = 2**63 - 1  # the largest id a database integer column holds
_NODE_NAME = re.compile(NODE_NAME_PATTERN)


def encode_token(position: list[Any]) -> str:
    """An opaque continue token for ``position`` (JSON scalars)."""
    return base64.urlsafe_b64encode(json.dumps(position, separators=(",", ":")).encode()).decode().rstrip("=")


class BadPageToken(HTTPException):
    """A ``continue`` token that is not one of ours (400)."""

    def __init__(self, what: str) -> None:
        super().__init__(status.HTTP_400_BAD_REQUEST, f"continue: not {what}")


def decode_token(token: str | None) -> list[Any] | None:
    """The position a continue token holds; None for no token. Raises a 400 for a token that is not ours."""
    if token is None:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        position = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError, RecursionError):
        position = None
    if not isinstance(position, list) or not position:
        raise BadPageToken("a continue token")
    return position


def node_position(token: str | None) -> str | None:
    """The node name a ``/v1/nodes`` token holds (None for no token); 400 unless it is a node name."""
    position = decode_token(token)
    if position is None:
        return None
    name = position[0] if len(position) == 1 else None
    if not isinstance(name, str) or len(name) > 253 or not _NODE_NAME.fullmatch(name):
        raise BadPageToken("a node list token")
    return name


def event_position(token: str | None) -> tuple[datetime, int] | None:
    """The (time, id) of the event a ``/v1/events`` token holds (None for no token); 400 unless it is an
    aware ISO time and an id a database integer can hold."""
    position = decode_token(token)
    if position is None:
        return None
    at, event_id = position if len(position) == 2 else (None, None)
    if not isinstance(at, str) or len(at) > 64 or not at.isascii():
        raise BadPageToken("an events token")
    if isinstance(event_id, bool) or not isinstance(event_id, int) or not 0 <= event_id <= MAX_ID:
        raise BadPageToken("an events token")
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        raise BadPageToken("an events token") from None
    if when.tzinfo is None:
        raise BadPageToken("an events token")
    return when, event_id


def announce_next(request: Request, response: Response, position: list[Any] | None) -> None:
    """Set ``Link: <url>; rel="next"`` for the page after ``position`` (none when the list ended)."""
    if position is None:
        return
    params = {key: value for key, value in request.query_params.items() if key != "continue"}
    params["continue"] = encode_token(position)
    response.headers["Link"] = f'<{request.url.path}?{urlencode(params)}>; rel="next"'
