"""Bounds on a request's head (request line and headers), applied while it is read, before authentication.

uvicorn's httptools parser accepts a head of any size, and gathers a long header by joining its pieces, so an
unauthenticated client sending tens of megabytes of header stalls the event loop for every other request.
The protocol here counts the head's bytes as they arrive and its headers as they complete, and answers 431
(and closes the connection) as soon as either passes its bound. With the h11 parser (when httptools is not
installed) h11's own bound on an incomplete head does the same for the size.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: text/plain; charset=utf-8\r\ncontent-length: 33\r\nconnection: close\r\n\r\n"
    b"request header fields too large\r\n"
)


class BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing (431) a head over ``max_head_bytes`` or ``max_headers``."""

    max_head_bytes = 32_768
    max_headers = 100

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # until the first message's headers are complete
        self._head_bytes = 0  # bytes received while in the head (a head sent in pieces)
        self._parsed_bytes = 0  # the URL's and the headers' bytes (a head that came in one piece)
        self._header_count = 0
        self._too_large = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = self._parsed_bytes = self._header_count = 0

    def on_url(self, url: bytes) -> None:
        self._parse_counted(len(url), headers=0)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._parse_counted(len(name) + len(value) + 4, headers=1)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_head and not self.transport.is_closing():
            # Still in the head after this chunk: all of it was head (a pipelined request's chunk may also
            # hold the end of the one before; one chunk at most is counted too many).
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._refuse()

    def send_400_response(self, msg: str) -> None:
        if self._too_large:  # the parser stopped on our callback's refusal: say which
            self._refuse()
            return
        super().send_400_response(msg)

    def _parse_counted(self, size: int, *, headers: int) -> None:
        self._parsed_bytes += size
        self._header_count += headers
        if self._parsed_bytes > self.max_head_bytes or self._header_count > self.max_headers:
            self._too_large = True
            raise HeadTooLarge

    def _refuse(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(TOO_LARGE)
            self.transport.close()


class HeadTooLarge(Exception):
    """The head has more headers than allowed (raised from the parser's callback)."""


def bounded_head_protocol(max_head_bytes: int, max_headers: int) -> type[BoundedHeadProtocol]:
    """The protocol class for these bounds (uvicorn's ``http`` option)."""
    return type(
        "BoundedHeadProtocol",
        (BoundedHeadProtocol,),
        {"max_head_bytes": max_head_bytes, "max_headers": max_headers},
    )
