"""A small tmpfs mounted for one test (as root), that a test can fill to the last byte and free again.

``TmpfsDisk(path, size)`` mounts at ``path`` (created if missing); ``fill()`` writes a filler file until the
file system answers ENOSPC, ``free()`` removes it, ``close()`` unmounts (lazily, so a process still holding a
file open does not keep the mount behind). The fixtures call ``close()`` in their finalizers.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

FILLER = ".gh31-filler"
CHUNK = 4096


def unavailable() -> str | None:
    """Why a tmpfs cannot be mounted here, or None when it can."""
    return "mounting a tmpfs needs root" if os.geteuid() != 0 else None


class TmpfsDisk:
    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True, timeout=30
        )
        self.mounted = True

    @property
    def filler(self) -> Path:
        return self.path / FILLER

    def fill(self) -> int:
        """Write until the disk is full, to the last byte; returns the bytes written."""
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 1 << 16, CHUNK, 512, 64, 1):
                while True:
                    try:
                        written += os.write(fd, b"\0" * size)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False, timeout=30)
            self.mounted = False
