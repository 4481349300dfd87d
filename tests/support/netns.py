"""Network namespaces and veth links of the fault suite's own test hosts (iproute2, as root).

A :class:`Namespace` is one node's network: its own loopback and one veth link per path it uses (to the
aggregator, to the API server), each a private /24 of 10.231.0.0/16 between the namespace and the host. The
services listen on the host side's address of their link, so a fault on one link cuts one path only. Only
these addresses are ever used; nothing leaves the machine.

Faults, in the kernel, on both ends of a link (so both directions): ``drop`` (a token bucket smaller than
any packet: every packet is dropped silently, as in a real partition; connections hang until their
timeouts), ``shape(rate)`` (a token bucket at ``rate``: queueing delay that grows with the request's size; a
slow link) and ``heal``. ``tc netem`` would give a fixed delay and random loss, but this kernel has neither
``sch_netem`` nor tc actions, so the suite uses ``tbf``, which it has; docs/reliability.md says so.

Everything made is removed by :meth:`Namespace.close` (the fixtures call it in their finalizers), also when
a test fails; :func:`sweep` removes what a killed test run left behind (names start with ``gh31``).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PREFIX = "gh31"
_numbers = itertools.count(1)


class NetnsUnavailable(RuntimeError):
    """Not root, or iproute2 missing: the partition faults cannot run here."""


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces and veth links need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    return None


def _run(*argv: str, check: bool = True) -> None:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")


@dataclass(frozen=True)
class Link:
    """A veth pair: ``host_dev`` at ``host_ip`` on the host, ``ns_dev`` at ``ns_ip`` in the namespace."""

    netns: str
    host_dev: str
    ns_dev: str
    host_ip: str
    ns_ip: str

    def _both(self, *qdisc: str) -> None:
        _run("tc", "qdisc", "replace", "dev", self.host_dev, "root", *qdisc)
        _run("ip", "netns", "exec", self.netns, "tc", "qdisc", "replace", "dev", self.ns_dev, "root", *qdisc)

    def drop(self) -> None:
        """Every packet either way is dropped, silently."""
        self._both("tbf", "rate", "1kbit", "burst", "10", "limit", "10")

    def shape(self, rate: str) -> None:
        """Both directions at most ``rate`` (e.g. ``64kbit``), queued up to a few seconds' worth."""
        self._both("tbf", "rate", rate, "burst", "1600", "latency", "5s")

    def heal(self) -> None:
        _run("tc", "qdisc", "del", "dev", self.host_dev, "root", check=False)
        _run("ip", "netns", "exec", self.netns, "tc", "qdisc", "del", "dev", self.ns_dev, "root", check=False)


class Namespace:
    """One network namespace with its links; ``close()`` removes them all."""

    def __init__(self) -> None:
        why = unavailable()
        if why is not None:
            raise NetnsUnavailable(why)
        self.number = next(_numbers)
        self.name = f"{PREFIX}-{os.getpid()}-{self.number}"
        self.links: list[Link] = []
        _run("ip", "netns", "add", self.name)
        _run("ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up")

    def link(self) -> Link:
        """A new veth link between the host and this namespace, on a /24 of 10.231.0.0/16 that no address of
        the host uses yet (chosen under a lock, so parallel test processes never pick the same one)."""
        index = len(self.links)
        tag = f"{os.getpid() % 100000}{self.number}{index}"
        host_dev, ns_dev = f"{PREFIX}h{tag}"[:15], f"{PREFIX}n{tag}"[:15]
        with (Path(tempfile.gettempdir()) / f"{PREFIX}-netns.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            addresses = subprocess.run(
                ["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True, timeout=30
            ).stdout
            used = {int(m) for m in re.findall(r"inet 10\.231\.(\d+)\.", addresses)}
            third = next(n for n in range(1, 255) if n not in used)
            link = Link(self.name, host_dev, ns_dev, f"10.231.{third}.1", f"10.231.{third}.2")
            _run("ip", "link", "add", link.host_dev, "type", "veth", "peer", "name", link.ns_dev)
            self.links.append(link)
            _run("ip", "addr", "add", f"{link.host_ip}/24", "dev", link.host_dev)
        _run("ip", "link", "set", link.ns_dev, "netns", self.name)
        _run("ip", "link", "set", link.host_dev, "up")
        _run("ip", "netns", "exec", self.name, "ip", "addr", "add", f"{link.ns_ip}/24", "dev", link.ns_dev)
        _run("ip", "netns", "exec", self.name, "ip", "link", "set", link.ns_dev, "up")
        return link

    def close(self) -> None:
        for link in self.links:
            _run("ip", "link", "del", link.host_dev, check=False)
        _run("ip", "netns", "del", self.name, check=False)


def sweep() -> None:
    """Remove the suite's namespaces and links a killed run of this process's parent left (by prefix)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False, timeout=30)
    for line in listed.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"{PREFIX}-"):
            pid = name.split("-")[1]
            if not Path(f"/proc/{pid}").exists():
                _run("ip", "netns", "del", name, check=False)
