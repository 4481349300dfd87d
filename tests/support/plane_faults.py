"""Faults of the real control plane (``control_plane.ControlPlane``): SIGKILL of etcd or kube-apiserver, a
seeded time down, and a start of the same binary with the same arguments (same ports, same etcd data
directory, same certificates), as a node's kubelet restarts a static pod."""

from __future__ import annotations

import os
import signal
import time

from control_plane import ControlPlane


def kill_and_restart(plane: ControlPlane, name: str, *, down_s: float) -> float:
    """SIGKILL ``name``'s process group, wait ``down_s``, start it again and wait until the API server is
    ready; returns the seconds from the kill to ready."""
    [process] = [p for p in plane.processes if p.name == name]
    argv = [str(arg) for arg in process.popen.args]  # type: ignore[union-attr]
    killed = time.monotonic()
    os.killpg(process.popen.pid, signal.SIGKILL)
    process.popen.wait()
    process.log_file.close()
    plane.processes.remove(process)
    time.sleep(down_s)
    restarted = plane.spawn(name, argv)
    if name == "kube-apiserver":
        plane.apiserver = restarted
    plane._wait_ready()
    return time.monotonic() - killed
