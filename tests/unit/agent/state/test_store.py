"""The state file: atomic saves, no write when unchanged, corrupt or foreign files set aside, and an agent
restarted mid-incident that continues the same incident."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from health_readings import HEALTHY, NVLINK_DOWN, XID_48, XID_79, Rig
from structlog.testing import capture_logs

from agent.state.machine import AgentState
from agent.state.store import StateStore, StateStoreError
from core.plan_memory import RemediationMemory


def saved_state(rig: Rig, memory: RemediationMemory | None = None) -> AgentState:
    return rig.machine.export(memory or RemediationMemory())


def corrupt_copies(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.corrupt-*"))


def test_missing_file_loads_as_none(tmp_path: Path) -> None:
    assert StateStore(tmp_path / "state.json").load() is None


def test_saved_state_loads_back_equal(tmp_path: Path) -> None:
    rig = Rig()
    rig.feed(XID_79, HEALTHY)
    memory = RemediationMemory(active_incident="inc-1", emitted_events=("inc-1/opened/reboot",))
    store = StateStore(tmp_path / "state.json")
    assert store.save(saved_state(rig, memory))
    assert StateStore(tmp_path / "state.json").load() == saved_state(rig, memory)


def test_unchanged_state_is_not_written_again(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    rig = Rig()
    rig.feed(HEALTHY)
    store = StateStore(path)
    assert store.save(saved_state(rig))
    written = path.stat().st_mtime_ns
    rig.feed(HEALTHY, HEALTHY, HEALTHY)
    assert not store.save(saved_state(rig))
    assert path.stat().st_mtime_ns == written


def test_a_restarted_agent_does_not_rewrite_the_state_it_loaded(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    rig = Rig()
    rig.feed(HEALTHY)
    StateStore(path).save(saved_state(rig))
    reopened = StateStore(path)
    loaded = reopened.load()
    assert loaded is not None
    assert not reopened.save(loaded)


def test_changed_state_is_written(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.json")
    rig = Rig()
    rig.feed(HEALTHY)
    store.save(saved_state(rig))
    rig.feed(XID_79)
    assert store.save(saved_state(rig))
    loaded = StateStore(tmp_path / "state.json").load()
    assert loaded is not None and loaded.health.incident is not None


def test_agent_restarted_mid_incident_continues_the_same_incident(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    rig = Rig()
    rig.feed(XID_48, NVLINK_DOWN, NVLINK_DOWN)
    StateStore(path).save(saved_state(rig))

    loaded = StateStore(path).load()
    rig.machine = rig.build(initial=loaded)
    rig.feed(NVLINK_DOWN, XID_79)
    incident = rig.machine.health.incident
    assert incident is not None
    assert incident.id == "inc-1"
    assert incident.reasons == ["XID_48", "NVLINK_DOWN", "XID_79"]  # the polled streak continued
    assert len(rig.ids.made) == 1


def test_a_crash_before_the_rename_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    store = StateStore(path)
    rig = Rig()
    rig.feed(HEALTHY)
    store.save(saved_state(rig))
    before = path.read_bytes()

    def crash(self: Path, target: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", crash)
    rig.feed(XID_79)
    with pytest.raises(StateStoreError, match=r"cannot write state file .*No space left on device"):
        store.save(saved_state(rig))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # the temporary file is cleaned up
    assert store.save(saved_state(rig))  # a failed save is retried on the next tick


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    rig = Rig()
    rig.feed(HEALTHY)
    with pytest.raises(StateStoreError, match="cannot write state file"):
        StateStore(tmp_path / "absent" / "state.json").save(saved_state(rig))


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"", b'{"schema_version": 1, "node": "gpu-node-07"}', b"[1, 2]"],
    ids=["torn", "empty", "missing-fields", "not-an-object"],
)
def test_corrupt_file_is_set_aside_and_loads_as_none(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with capture_logs() as logs:
        assert StateStore(path).load() is None
    assert [(e["event"], e["log_level"]) for e in logs] == [("state_set_aside", "warning")]
    assert not path.exists()
    [aside] = corrupt_copies(path)
    assert aside.read_bytes() == content


def test_other_schema_version_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    rig = Rig()
    rig.feed(XID_79)
    document = json.loads(saved_state(rig).model_dump_json())
    document["schema_version"] = 2
    document["health"]["new_field_of_v2"] = True
    path.write_text(json.dumps(document))
    assert StateStore(path).load() is None
    assert len(corrupt_copies(path)) == 1


def test_repeated_corruption_keeps_every_copy(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    for attempt in range(3):
        path.write_text(f"garbage {attempt}")
        assert StateStore(path).load() is None
    assert sorted(p.read_text() for p in corrupt_copies(path)) == ["garbage 0", "garbage 1", "garbage 2"]
