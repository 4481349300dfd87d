"""The one exception type of the kernel-log reader."""

from __future__ import annotations


class KernelLogError(Exception):
    """A kernel log that cannot be read (missing, unreadable, corrupt archive). The message is one line."""
