"""The chart's recovery values (docs/recovery.md): off by default; on, the agent's `recovery` settings come
from the values, kured's sentinel directory is the one read-write host path added, and the container is
privileged for `nvidia-smi --gpu-reset` only while `recovery.reset.privileged` says so. Rendered by Helm's
own engine, validated against the Kubernetes schemas, linted, and loaded into the agent's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate  # type: ignore[import-untyped]  # ships no type information
import pytest
import yaml

from agent.settings import load_settings
from tests.helm.conftest import CHART_DIR, NAMESPACE, Manifest, Render, one

KUBERNETES_VERSION = kubernetes_validate.latest_version()
RECOVERY_ON: dict[str, Any] = {"drain": {"enabled": True}, "recovery": {"enabled": True}}
VARIATIONS: dict[str, dict[str, Any]] = {
    "recovery-on": RECOVERY_ON,
    "recovery-unprivileged": {**RECOVERY_ON, "recovery": {"enabled": True, "reset": {"privileged": False}}},
    "recovery-tuned": {
        **RECOVERY_ON,
        "recovery": {
            "enabled": True,
            "config": {
                "max_attempts": 3,
                "retry_backoff_s": 30,
                "reboot": {"deadline_s": 900},
                "validation": {"dcgmi_level": 1, "clean_readings": 5},
            },
            "reboot": {"sentinelHostDir": "/run/kured-gpu/", "sentinelFile": "reboot-now"},
            "reset": {"persistencedSocketDir": ""},
        },
    },
    "recovery-command-reboot": {
        **RECOVERY_ON,
        "recovery": {
            "enabled": True,
            "config": {"reboot": {"mode": "command", "command": ["systemctl", "reboot"]}},
        },
    },
}


def container(objects: list[Manifest]) -> dict[str, Any]:
    spec = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    found: dict[str, Any] = next(c for c in spec["containers"] if c["name"] == "agent")
    return found


def host_mounts(objects: list[Manifest]) -> dict[str, tuple[str, bool]]:
    """Container mount path -> (host path, read-only) for every hostPath volume."""
    volumes = one(objects, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    host = {v["name"]: v["hostPath"]["path"] for v in volumes if "hostPath" in v}
    return {
        m["mountPath"]: (host[m["name"]], m.get("readOnly", False))
        for m in container(objects)["volumeMounts"]
        if m["name"] in host
    }


def agent_config(objects: list[Manifest]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    return config


def test_recovery_is_off_by_default_and_adds_nothing(render: Render) -> None:
    """Default: no recovery section in the agent's file, no privilege, no sentinel mount."""
    objects = render()

    assert "recovery" not in agent_config(objects)
    assert container(objects)["securityContext"]["privileged"] is False
    assert set(host_mounts(objects)) == {"/var/lib/gpuhealth"}


@pytest.mark.parametrize("variation", VARIATIONS)
def test_recovery_renders_valid_objects_and_lints_clean(render: Render, variation: str) -> None:
    for obj in render(VARIATIONS[variation]):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    report = helm.lint(
        CHART_DIR, VARIATIONS[variation], strict=True, namespace=NAMESPACE, kube_version="v1.30.0"
    )
    assert [m for m in report["messages"] if m["severity"] >= 2] == [] and report["errors"] == []


@pytest.mark.parametrize("variation", VARIATIONS)
def test_the_config_file_loads_with_recovery_as_the_values_say(
    render: Render, variation: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent accepts the rendered file; recovery is on, the sentinel path is the mounted directory's
    file, and every value under recovery.config reaches the agent's settings."""
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    values = VARIATIONS[variation]
    objects = render(values)
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap")["data"]["config.yaml"])

    recovery = load_settings(path).recovery

    assert recovery.enabled
    chart = values["recovery"]
    sentinel_dir = chart.get("reboot", {}).get("sentinelHostDir", "/run/gpuhealth").rstrip("/")
    sentinel_file = chart.get("reboot", {}).get("sentinelFile", "reboot-required")
    assert recovery.reboot.sentinel_path == Path(sentinel_dir) / sentinel_file
    config = chart.get("config", {})
    assert recovery.max_attempts == config.get("max_attempts", 2)
    assert recovery.retry_backoff_s == config.get("retry_backoff_s", 60.0)
    assert recovery.reboot.deadline_s == config.get("reboot", {}).get("deadline_s", 1800.0)
    assert recovery.reboot.mode == config.get("reboot", {}).get("mode", "kured")
    assert recovery.validation.clean_readings == config.get("validation", {}).get("clean_readings", 3)


def test_kured_mode_mounts_only_the_sentinels_directory_read_write(render: Render) -> None:
    """The one host path recovery adds is the sentinel's own directory (not /var/run with the runtime's
    socket), writable, at the same path inside; the persistenced socket directory comes with the reset."""
    mounts = host_mounts(render(RECOVERY_ON))

    assert mounts == {
        "/var/lib/gpuhealth": ("/var/lib/gpuhealth", False),
        "/run/gpuhealth": ("/run/gpuhealth", False),
        "/run/nvidia-persistenced": ("/run/nvidia-persistenced", False),
    }
    assert not any(host in {"/var/run", "/run"} for host, _ in mounts.values())


def test_other_reboot_modes_mount_no_sentinel(render: Render) -> None:
    assert "/run/gpuhealth" not in host_mounts(render(VARIATIONS["recovery-command-reboot"]))


def test_the_reset_makes_the_container_privileged_but_shares_no_host_namespace(render: Render) -> None:
    """nvidia-smi --gpu-reset needs root's powers: privileged (and so privilege escalation allowed), still
    no host PID, network or IPC, read-only root filesystem, default seccomp for the pod."""
    objects = render(RECOVERY_ON)
    security = container(objects)["securityContext"]
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]

    assert security["privileged"] is True and security["runAsUser"] == 0
    assert security["readOnlyRootFilesystem"] is True
    assert not {"hostPID", "hostNetwork", "hostIPC"} & set(pod)


def test_an_unprivileged_recovery_keeps_every_capability_dropped(render: Render) -> None:
    """recovery.reset.privileged false: the agent stays as confined as without recovery (resets then fail
    and escalate; reboots still work through the sentinel), and no persistenced socket is mounted."""
    objects = render(VARIATIONS["recovery-unprivileged"])
    security = container(objects)["securityContext"]

    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert set(host_mounts(objects)) == {"/var/lib/gpuhealth", "/run/gpuhealth"}


def test_recovery_without_drain_fails_the_render_with_one_clear_message(render: Render) -> None:
    with pytest.raises(helm.HelmRenderError, match=r"recovery\.enabled needs drain\.enabled"):
        render({"recovery": {"enabled": True}})


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"recovery": {"config": {"enabled": True}}}, "enabled"),
        ({"recovery": {"config": {"reboot": {"sentinel_path": "/x"}}}}, "sentinel_path"),
        ({"recovery": {"config": {"reboot": {"mode": "ipmi"}}}}, "mode"),
        ({"recovery": {"reboot": {"sentinelHostDir": "run/gpuhealth"}}}, "sentinelHostDir"),
        ({"recovery": {"reboot": {"sentinelFile": "a/b"}}}, "sentinelFile"),
        ({"recovery": {"reset": {"privileged": "yes"}}}, "privileged"),
    ],
)
def test_a_bad_recovery_value_fails_the_render_naming_it(
    render: Render, values: dict[str, Any], named: str
) -> None:
    """What the chart sets itself cannot be set under recovery.config; wrong types and paths are refused."""
    with pytest.raises(helm.HelmValuesError, match=named):
        render(values)


def test_notes_tell_how_to_start_kured(render_notes: Any) -> None:
    notes = render_notes(RECOVERY_ON)

    assert "--reboot-sentinel=/run/gpuhealth/reboot-required" in notes
    assert "privileged" in notes
    assert "reboot-sentinel" not in render_notes()
