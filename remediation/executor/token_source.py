"""Where a bearer token comes from: an environment variable first, else a mounted file.

Both the Nomad ACL token and the aggregator's token are read this way, so that a secret never has to sit
in a settings file; errors name the file, never the token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path


def stripped_text(text: str) -> str | None:
    """The whole file, whitespace trimmed; None when empty."""
    return text.strip() or None


def token_from_env_or_file(
    env_var: str,
    token_file: Path | None,
    environ: Mapping[str, str],
    *,
    unreadable: Callable[[OSError], Exception],
    from_text: Callable[[str], str | None] = stripped_text,
) -> str | None:
    """``environ[env_var]`` when set, else ``from_text`` of ``token_file``; None when neither is set.

    Raises what ``unreadable`` builds from the OSError when the file cannot be read.
    """
    token = environ.get(env_var, "").strip()
    if token:
        return token
    if token_file is None:
        return None
    try:
        text = token_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise unreadable(exc) from None
    return from_text(text)
