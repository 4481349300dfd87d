"""``python -m aggregator.auth.hash_token``: print the SHA-256 of the token given on standard input.

The token is read from stdin (never a command-line argument, which other users can see in ``ps``); one
trailing newline is ignored. Tokens shorter than the minimum are refused.
"""

from __future__ import annotations

import sys

from aggregator.auth.token_file import MIN_TOKEN_LENGTH, token_sha256


def main() -> int:
    """Hash one token; exit 2 when it is too short."""
    token = sys.stdin.read().removesuffix("\n")
    if len(token) < MIN_TOKEN_LENGTH:
        print(f"hash_token: error: a token needs at least {MIN_TOKEN_LENGTH} characters", file=sys.stderr)
        return 2
    print(token_sha256(token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
