"""What the evidence archive and a diagnostic's raw output must never carry: credentials."""

from __future__ import annotations

import time

from core.redaction import REDACTED, redact, redact_text, tail


def test_json_members_under_secret_keys_and_bearer_credentials_are_redacted_in_text() -> None:
    text = (
        '{"password": "hunter2\\"x", "API-Key": "k1", "name": "GPU 3", "auth_token":"", '
        '"note": "sent with Bearer abcdefghij0123"}'
    )
    assert redact_text(text) == (
        f'{{"password": "{REDACTED}", "API-Key": "{REDACTED}", "name": "GPU 3", "auth_token":"", '
        f'"note": "sent with Bearer {REDACTED}"}}'
    )


def test_documents_are_redacted_by_key_and_in_their_texts() -> None:
    document = {"token": "abc", "secret": None, "list": [{"message": '"credential": "c-42"'}], "n": 3}
    assert redact(document) == {
        "token": REDACTED,
        "secret": None,
        "list": [{"message": f'"credential": "{REDACTED}"'}],
        "n": 3,
    }


def test_a_long_hostile_text_is_redacted_in_linear_time() -> None:
    """dcgmi output up to 64 KiB and more: no pattern may backtrack over it."""
    hostile = "x" * 200_000 + '"' * 20_000 + '"token": "' + "y" * 100_000
    started = time.perf_counter()
    redact_text(hostile)
    assert time.perf_counter() - started < 2.0


def test_tail_keeps_the_last_bytes_cut_at_a_character() -> None:
    assert tail("short", 64) == "short"
    assert tail("abcdef", 3) == "def"
    assert tail("aé€", 4) == "€"  # the last 4 bytes begin inside "é": that half goes
    assert len(tail("€" * 10, 7).encode()) <= 7
