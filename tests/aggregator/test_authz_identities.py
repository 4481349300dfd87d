"""Authentication: the token file (hashes only, checked at load), the hashing tool, the deprecated shared
token, the loopback-only anonymous demo, and 401s logged rate-limited without the token."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from aggregator.auth.answer_cache import AnswerCache, Unknown
from aggregator.auth.authenticators import SharedTokenAuthenticator, TokenFileAuthenticator
from aggregator.auth.chain import AuthChain, Caller, NotAuthenticated, build_chain
from aggregator.auth.principal import AuthMethod, Principal, Role
from aggregator.auth.token_file import MIN_TOKEN_LENGTH, TokenFileError, load_token_file, token_sha256
from aggregator.auth.unauthorized_log import UnauthorizedLog
from aggregator.settings import load_settings
from core.settings import SettingsError

TOKEN = "a" * MIN_TOKEN_LENGTH
HASH = token_sha256(TOKEN)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("tokens: [{name: n1, role: agent, sha256: " + HASH + "}]", "an agent entry must name its node"),
        ("tokens: [{name: ana, role: viewer, node: n1, sha256: " + HASH + "}]", "only an agent entry names a node"),
        ("tokens: [{name: ana, role: viewer, sha256: not-a-hash}]", "tokens.0.sha256"),
        ("tokens: [{name: ana, role: root, sha256: " + HASH + "}]", "tokens.0.role"),
        ("tokens: [{name: ana, role: viewer, token: " + TOKEN + "}]", "tokens.0.sha256"),
        (
            "tokens: [{name: a, role: viewer, sha256: " + HASH + "}, {name: b, role: admin, sha256: " + HASH + "}]",
            "two entries share one token hash",
        ),
        ("tokens: [{name: a, role: viewer, sha256: " + HASH + "}, {name: a, role: admin, sha256: " + "b" * 64 + "}]",
         "names must be unique"),
        ("tokens: [unclosed", "not valid YAML or JSON"),
    ],
)  # fmt: skip
def test_an_invalid_token_file_is_refused_at_load_with_one_line(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TokenFileError) as refused:
        load_token_file(path)
    assert problem in str(refused.value)
    assert str(path) in str(refused.value)
    assert TOKEN not in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_missing_token_file_stops_the_aggregator_with_a_settings_error(tmp_path: Path) -> None:
    settings = load_settings(environ={}, token_file=tmp_path / "absent.yaml")
    with pytest.raises(SettingsError, match="cannot read the token file"):
        build_chain(settings)


def test_json_token_files_work_too(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text('{"tokens": [{"name": "n1", "role": "agent", "node": "n1", "sha256": "' + HASH + '"}]}')
    principal = TokenFileAuthenticator(load_token_file(path)).authenticate(TOKEN)
    assert principal is not None
    assert (principal.name, principal.role, principal.node, principal.method) == (
        "n1",
        Role.AGENT,
        "n1",
        AuthMethod.TOKEN_FILE,
    )
    assert not principal.any_node


def test_short_tokens_never_authenticate_even_when_their_hash_is_listed(tmp_path: Path) -> None:
    short = "s" * (MIN_TOKEN_LENGTH - 1)
    path = tmp_path / "tokens.yaml"
    path.write_text(f"tokens: [{{name: ana, role: admin, sha256: {token_sha256(short)}}}]")
    assert TokenFileAuthenticator(load_token_file(path)).authenticate(short) is None


def test_a_fleet_sized_token_file_names_each_node_by_its_own_token(tmp_path: Path) -> None:
    tokens = {f"gpu-node-{n}": f"{n:08d}-" + "t" * MIN_TOKEN_LENGTH for n in range(10_000)}
    entries = [
        {"name": node, "role": "agent", "node": node, "sha256": token_sha256(token)}
        for node, token in tokens.items()
    ]
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": entries}))
    authenticator = TokenFileAuthenticator(load_token_file(path))
    for node in ("gpu-node-0", "gpu-node-4711", "gpu-node-9999"):
        principal = authenticator.known_answer(tokens[node])
        assert isinstance(principal, Principal)
        assert (principal.name, principal.node) == (node, node)
    assert authenticator.authenticate("x" * MIN_TOKEN_LENGTH) is None


class _SlowAuthority:
    """An authenticator that must ask another server until it has answered a token once (as the TokenReview,
    Nomad and OIDC authenticators do), counting what it was asked."""

    def __init__(self, principal: Principal) -> None:
        self._principal = principal
        self.remote_calls = 0
        self._answers = AnswerCache(lambda: 0.0, 10)

    def known_answer(self, token: str) -> Principal | Unknown | None:
        return self._answers.get(token)

    def authenticate(self, token: str) -> Principal | None:
        known = self._answers.get(token)
        if not isinstance(known, Unknown):
            return known
        self.remote_calls += 1
        answer = self._principal if token == TOKEN else None
        self._answers.put(token, answer, until=60.0)
        return answer


def test_a_known_answer_is_given_at_once_and_only_an_unknown_one_is_sent_to_the_thread() -> None:
    agent = Principal(name="n1", role=Role.AGENT, method=AuthMethod.KUBERNETES, node="n1")
    authority = _SlowAuthority(agent)
    chain = AuthChain([SharedTokenAuthenticator("s" * MIN_TOKEN_LENGTH, Role.ADMIN), authority])
    assert chain.resolve_known(TOKEN, "10.0.0.5") is None  # must ask: the caller goes to a thread
    assert chain.resolve(TOKEN, "10.0.0.5").principal == agent
    assert chain.resolve_known(TOKEN, "10.0.0.5") == Caller(agent, "10.0.0.5")
    assert authority.remote_calls == 1
    wrong = "w" * MIN_TOKEN_LENGTH
    assert chain.resolve_known(wrong, "10.0.0.5") is None
    with pytest.raises(NotAuthenticated):
        chain.resolve(wrong, "10.0.0.5")
    with pytest.raises(NotAuthenticated):  # the refusal is remembered too, and given without a thread
        chain.resolve_known(wrong, "10.0.0.5")
    assert authority.remote_calls == 2


def test_the_hashing_tool_reads_stdin_and_refuses_short_tokens() -> None:
    command = [sys.executable, "-m", "aggregator.auth.hash_token"]
    hashed = subprocess.run(
        command, input=TOKEN + "\n", capture_output=True, text=True, timeout=60, check=False
    )
    assert (hashed.returncode, hashed.stdout) == (0, HASH + "\n")
    short = subprocess.run(command, input="short\n", capture_output=True, text=True, timeout=60, check=False)
    assert short.returncode == 2
    assert f"at least {MIN_TOKEN_LENGTH} characters" in short.stderr
    assert short.stdout == ""


def test_the_shared_token_acts_for_any_node_with_its_configured_role() -> None:
    principal = SharedTokenAuthenticator(TOKEN, Role.OPERATOR).authenticate(TOKEN)
    assert principal is not None
    assert (principal.role, principal.method, principal.any_node) == (
        Role.OPERATOR,
        AuthMethod.SHARED_TOKEN,
        True,
    )
    assert principal.may_act_for("any-node")
    assert SharedTokenAuthenticator(TOKEN, Role.ADMIN).authenticate(TOKEN + "x") is None


def test_a_fleet_needs_some_identity() -> None:
    with pytest.raises(SettingsError, match="no identities"):
        load_settings(environ={})


@pytest.mark.parametrize(("client", "admitted"), [("127.0.0.1", True), ("::1", True), ("10.0.0.5", False)])
def test_anonymous_callers_are_admitted_from_loopback_only(client: str, admitted: bool) -> None:
    chain = AuthChain([], allow_anonymous=True)
    if admitted:
        assert chain.resolve(None, client).principal.role is Role.ADMIN
    else:
        with pytest.raises(NotAuthenticated):
            chain.resolve(None, client)


def test_a_wrong_token_is_refused_even_when_anonymous_callers_are_allowed() -> None:
    chain = AuthChain([SharedTokenAuthenticator(TOKEN, Role.ADMIN)], allow_anonymous=True)
    with pytest.raises(NotAuthenticated):
        chain.resolve("b" * 40, "127.0.0.1")


def test_refusals_are_logged_once_a_minute_per_address_and_never_with_the_token() -> None:
    now = [0.0]
    chain = AuthChain([], unauthorized_log=UnauthorizedLog(monotonic=lambda: now[0]))
    secret = "c" * 40
    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            with pytest.raises(NotAuthenticated):
                chain.resolve(secret, "10.0.0.9")
        now[0] = 61.0
        with pytest.raises(NotAuthenticated):
            chain.resolve(secret, "10.0.0.9")
    refused = [line for line in logs if line["event"] == "request refused: not authenticated"]
    assert [(line["client"], line["since_last"]) for line in refused] == [("10.0.0.9", 0), ("10.0.0.9", 4)]
    assert all(secret not in repr(line) for line in logs)
