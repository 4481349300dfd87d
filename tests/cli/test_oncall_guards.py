"""The on-call commands' guards against a live aggregator (in this process): node names are checked before
any request and travel percent-encoded, and risky commands say what they would do and ask unless --yes."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from waiting import wait_until

from core.clock import utc_now
from gpuhealth.cli.main import main
from sim.aggregator_process import AggregatorServer
from tests.aggregator.alert_receiver import Receiver
from tests.aggregator.builders import AUTH, TOKEN, report


class _Terminal(io.StringIO):
    """Standard input that is a terminal, with the person's answer typed in."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    hook = Receiver().start()
    yield hook
    hook.stop()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[AggregatorServer]:
    root = tmp_path_factory.mktemp("guards")
    sink = {"name": "hook", "type": "webhook", "url": receiver.url, "timeout_s": 5}
    server = AggregatorServer(
        root / "a.db", TOKEN, now=utc_now, alert_sinks=[sink], alert_poll_s=0.05
    ).start()
    now = datetime.now(UTC)
    for body in (
        report(
            "node-sick",
            1,
            "unhealthy",
            incident="inc-sick",
            sent_at=now,
            actions=[{"at": now.isoformat(), "action": "drain", "result": "ok", "incident_id": "inc-sick"}],
        ),
        report("node-fixed", 1, "unhealthy", incident="inc-fixed", sent_at=now),
        report(
            "node-fixed",
            2,
            "unhealthy",
            incident="inc-fixed",
            sent_at=now,
            actions=[{"at": now.isoformat(), "action": "reboot", "result": "ok", "incident_id": "inc-fixed"}],
        ),
        report("node-ok", 1, "healthy", sent_at=now),
    ):
        assert httpx.post(f"{server.url}/v1/reports", json=body, headers=AUTH).status_code == 200
    yield server
    server.stop()


@pytest.fixture
def cli(live: AggregatorServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands talk to ``live``; standard input is no terminal (a script)."""
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_URL", live.url)
    monkeypatch.setenv("GPUHEALTH_TOKEN", TOKEN)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["node", ""],
        ["node", "a/b"],
        ["forget", "../silences/1", "--yes"],
        ["events", "--node", "x y"],
        ["quarantine", "bad_", "--reason", "r"],
        ["silence", "..", "--for", "1h", "--reason", "r"],
    ],
)
def test_a_name_no_node_can_have_is_one_line_before_any_request(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # --url points nowhere: a request would fail differently (exit 1, "cannot reach").
    code, out, err = _run(capsys, *argv, "--url", "http://127.0.0.1:9")
    assert code == 2
    assert out == ""
    assert "is not a node name" in err
    assert len(err.strip().splitlines()) == 1


def test_a_node_name_with_a_slash_cannot_reach_another_route(live: AggregatorServer) -> None:
    """The client percent-encodes the name: ``forget ../silences/1`` is a node lookup, not a silence's delete."""
    from agent.uplink.client import AggregatorError

    with live.client() as client:
        from core.alerts_api import SilenceCreate

        made = client.silence(SilenceCreate(node="node-ok", duration_s=3600, reason="kept"))
        for name in (f"../silences/{made.id}", "..", "a/b"):
            with pytest.raises(AggregatorError):
                client.forget_node(name)
        assert made.id in [silence.id for silence in client.silences()]
        client.remove_silence(made.id)


def test_release_of_an_unremediated_incident_is_refused_without_a_terminal_or_yes(
    cli: None, capsys: pytest.CaptureFixture[str], live: AggregatorServer
) -> None:
    code, out, err = _run(capsys, "release", "node-sick")
    assert code == 2
    assert "node-sick has open incident inc-sick (XID_79; action reboot)" in err
    assert "not done without --yes" in err and len(err.strip().splitlines()) == 1
    with live.client() as client:
        assert client.pending_requests("node-sick") == []

    code, out, _err = _run(capsys, "release", "node-sick", "--yes")
    assert code == 0
    assert "release of node-sick requested" in out


def test_release_asks_on_a_terminal_and_a_no_does_nothing(
    cli: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, live: AggregatorServer
) -> None:
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    code, _out, err = _run(capsys, "release", "node-sick")
    assert code == 1
    assert "Go ahead? [y/N]" in err and "nothing done" in err
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    code, out, _err = _run(capsys, "release", "node-sick")
    assert code == 0 and "release of node-sick requested" in out


def test_release_after_a_remediation_does_not_ask(cli: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "release", "node-fixed")
    assert code == 0, err
    assert "release of node-fixed requested" in out


def test_forget_of_a_node_that_still_reports_asks(cli: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _run(capsys, "forget", "node-ok")
    assert code == 2
    assert "its agent still reports" in err and "--yes" in err


def test_silence_of_a_node_that_never_reported_is_refused_unless_force(
    cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = _run(capsys, "silence", "node-typo", "--for", "1h", "--reason", "r")
    assert code == 2
    assert "node-typo never reported" in err and "--force" in err
    code, out, err = _run(capsys, "silence", "node-typo", "--for", "1h", "--reason", "r", "--force")
    assert code == 0, err
    assert "on node-typo until" in out


def test_retry_of_a_delivered_alert_is_refused_unless_force(
    cli: None, capsys: pytest.CaptureFixture[str], live: AggregatorServer, receiver: Receiver
) -> None:
    with live.client() as client:
        wait_until(
            lambda: any(d.status == "delivered" for a in client.alerts() for d in a.deliveries),
            message="an alert delivered",
        )
        delivered = next(d for a in client.alerts() for d in a.deliveries if d.status == "delivered")
    sent = len(receiver.received)
    code, _out, err = _run(capsys, "alerts", "--retry", str(delivered.id))
    assert code == 2
    assert f"delivery {delivered.id} to hook was delivered at " in err and "--force" in err
    assert len(err.strip().splitlines()) == 1
    code, out, err = _run(capsys, "alerts", "--retry", str(delivered.id), "--force")
    assert code == 0, err
    assert "queued again" in out
    wait_until(lambda: len(receiver.received) > sent, message="the delivery sent again")


def test_confirm_reads_the_answer_from_the_terminal() -> None:
    from gpuhealth.cli.errors import CliError
    from gpuhealth.cli.guard import confirm

    asked = io.StringIO()
    confirm("this drains node-1", yes=False, stdin=_Terminal("yes\n"), stderr=asked)
    assert asked.getvalue().startswith("this drains node-1.\nGo ahead? [y/N] ")
    confirm("anything", yes=True, stdin=io.StringIO(""))  # --yes: not asked at all
    with pytest.raises(CliError, match="nothing done"):
        confirm("this drains node-1", yes=False, stdin=_Terminal("\n"), stderr=io.StringIO())
