"""A TCP relay that delays what it forwards: the fault suite's stand-in for ``tc netem delay``.

``python delay_relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT CONTROL_FILE`` accepts connections on
the listening address and forwards each to the target, both directions. Every chunk read from one side is
written to the other ``delay`` seconds after it was read, in order: a fixed one-way delay on the data, as
``netem delay`` puts on packets. ``delay`` is the number of milliseconds in ``CONTROL_FILE`` (read again
every 20 ms; absent or empty: no delay), so a test turns the delay on and off while connections live.

What it is not: the kernel still carries the packets at full speed on both of the relay's connections, so
TCP's handshake, its acknowledgements and its retransmission timers see no delay (an application sees the
delay on every request and answer, and a new connection's first request waits one delay each way, not a
delayed handshake); it cannot lose packets (a relay of a byte stream has nothing to drop without breaking
the stream), and it has no jitter. The suite runs it inside the node's network namespace, listening on the
namespace's loopback, so the agent's traffic to the relayed service still crosses the node's own veth link.
Prints ``ready`` on standard output once it listens.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

CHUNK = 65536
RELOAD_S = 0.02


class Delay:
    """The current one-way delay in seconds, read from a control file."""

    def __init__(self, control: Path) -> None:
        self._control = control
        self.seconds = 0.0

    async def follow(self) -> None:
        while True:
            try:
                text = self._control.read_text(encoding="utf-8").strip()
                self.seconds = float(text) / 1000.0 if text else 0.0
            except (OSError, ValueError):
                self.seconds = 0.0
            await asyncio.sleep(RELOAD_S)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` after it was read, keeping the order; the end of
    the stream (or a reset) is passed on the same way."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        data = b"-"
        while data:
            try:
                data = await reader.read(CHUNK)
            except OSError:
                data = b""
            queue.put_nowait((time.monotonic() + delay.seconds, data))

    async def write() -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
            except OSError:
                return

    await asyncio.gather(read(), write())


async def _serve(listen: tuple[str, int], target: tuple[str, int], delay: Delay) -> None:
    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*target)
        except OSError:
            client_writer.close()
            return
        try:
            await asyncio.gather(
                _pump(client_reader, server_writer, delay), _pump(server_reader, client_writer, delay)
            )
        finally:
            for writer in (client_writer, server_writer):
                writer.close()

    server = await asyncio.start_server(relay, *listen)
    follower = asyncio.create_task(delay.follow())
    print("ready", flush=True)
    async with server:
        await server.serve_forever()
    follower.cancel()


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(
            "usage: delay_relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT CONTROL_FILE",
            file=sys.stderr,
        )
        return 2
    listen_host, listen_port, target_host, target_port, control = argv
    try:
        asyncio.run(
            _serve((listen_host, int(listen_port)), (target_host, int(target_port)), Delay(Path(control)))
        )
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
