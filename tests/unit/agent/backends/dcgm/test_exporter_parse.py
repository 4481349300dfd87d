"""dcgm-exporter pages of several releases: parsed per GPU, sentinels as missing, judged by the NVML checks."""

from __future__ import annotations

import pytest
from dcgm_judge import findings_for_page
from repo_paths import FIXTURES as TEST_FIXTURES

from agent.backends.dcgm.exporter import ExporterError, host_of, is_blank, parse_metrics
from checks.config import ChecksConfig
from checks.dcgm_exporter import UNAVAILABLE_CODE
from checks.runner import merge_findings
from core.findings import Action, Finding, Status
from core.snapshot import GpuSnapshot, NodeSnapshot

FIXTURES = TEST_FIXTURES / "dcgm"


def page(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def codes(findings: list[Finding]) -> set[tuple[str, str]]:
    return {(f.code, f.status.value) for f in findings}


@pytest.mark.parametrize(
    ("fixture", "gpu_count", "host"),
    [
        ("exporter-2.1.4-2.3.1-healthy.prom", 2, "dcgm-exporter-lcxpl"),
        ("exporter-3.3.5-3.4.1-faults-pods.prom", 4, "gpu-node-03"),
        ("exporter-4.2.3-4.1.3-xid48-health.prom", 2, "gpu-node-11"),
        ("exporter-4.5-hostname-healthy.prom", 2, "gpu-node-07"),
    ],
)
def test_every_release_page_parses_into_its_gpus_and_host_label(
    fixture: str, gpu_count: int, host: str
) -> None:
    """Hostname (older releases) and hostname (after the rename) both name the host; GPUs keep their UUIDs."""
    gpus = parse_metrics(page(fixture))
    assert [gpu.index for gpu in gpus] == list(range(gpu_count))
    assert all(gpu.uuid.startswith("GPU-") and "index" not in gpu.uuid for gpu in gpus)
    assert host_of(gpus) == host


def test_blank_sentinels_read_as_missing_never_as_faults() -> None:
    """9223372036854775794 (int64 not supported) and 2147483632 (int32 blank) are no reading at all."""
    assert is_blank(9223372036854775794.0)
    assert is_blank(2147483632.0)
    assert is_blank(140737488355328.0)
    assert is_blank(float("nan"))
    assert not is_blank(4213.0)
    gpus = parse_metrics(page("exporter-4.5-hostname-healthy.prom"))
    assert gpus[1].dbe_volatile is None
    assert gpus[1].remapped_uncorrectable is None
    assert findings_for_page(page("exporter-4.5-hostname-healthy.prom"), None, ChecksConfig()) == []


def test_release_3_page_yields_the_nvml_checks_codes_and_actions() -> None:
    """Same codes and actions as NVML: DBE volatile reset_gpu, remap pending, replays warn, XID 79 reboot."""
    found = findings_for_page(page("exporter-3.3.5-3.4.1-faults-pods.prom"), None, ChecksConfig())
    assert codes(found) == {
        ("ECC_DBE_VOLATILE", "fail"),
        ("ROW_REMAP_PENDING", "fail"),
        ("PCIE_REPLAYS", "warn"),
        ("XID_79", "fail"),
    }
    xid = next(f for f in found if f.code == "XID_79")
    assert xid.action is Action.REBOOT
    assert xid.gpu == "GPU-c07eb90d-74b0-d3b4-e6ce-f18687564243"
    assert {f.check for f in found} == {"dcgm_exporter"}


def test_release_4_xid_count_window_and_health_status_are_used() -> None:
    """XID 48 with 63 in the window -> drain_and_reset (catalogue workflow); MEM health fail, PCIE warn."""
    found = findings_for_page(page("exporter-4.2.3-4.1.3-xid48-health.prom"), None, ChecksConfig())
    by_code = {f.code: f for f in found}
    assert by_code["XID_48"].action is Action.DRAIN_AND_RESET
    assert by_code["DCGM_HEALTH_MEM"].status is Status.FAIL
    assert "DCGM_FR_VOLATILE_DBE_DETECTED" in by_code["DCGM_HEALTH_MEM"].message
    assert by_code["DCGM_HEALTH_PCIE"].status is Status.WARN
    assert by_code["DCGM_HEALTH_PCIE"].action is Action.NONE


def test_series_without_uuid_map_to_the_snapshot_gpu_of_that_index() -> None:
    """A page relabelled without UUID: the gpu index resolves to the UUID NVML gives that index."""
    snapshot = NodeSnapshot(
        node="gpu-node-07", gpus=[GpuSnapshot(index=0, uuid="GPU-aaa"), GpuSnapshot(index=1, uuid="GPU-bbb")]
    )
    found = findings_for_page(page("exporter-index-only.prom"), snapshot, ChecksConfig())
    assert [(f.code, f.gpu) for f in found] == [("ECC_DBE_VOLATILE", "GPU-bbb")]


def test_garbled_page_is_exactly_one_unknown_finding() -> None:
    found = findings_for_page(page("garbled.prom"), None, ChecksConfig())
    assert [(f.code, f.status) for f in found] == [(UNAVAILABLE_CODE, Status.UNKNOWN)]


def test_a_prometheus_page_without_dcgm_series_is_not_an_exporter_page() -> None:
    with pytest.raises(ExporterError, match="no DCGM_ series"):
        parse_metrics("# TYPE up gauge\nup 1\n")


def test_merge_keeps_one_finding_per_gpu_and_code_the_worse_one() -> None:
    """The exporter repeating NVML's finding does not list one fault twice; a worse report wins."""
    nvml = Finding(check="ecc", gpu="G", status=Status.WARN, code="X", message="a", action=Action.NONE)
    dcgm = Finding(
        check="dcgm_exporter", gpu="G", status=Status.FAIL, code="X", message="b", action=Action.RESET_GPU
    )
    other = dcgm.model_copy(update={"gpu": "H"})
    assert merge_findings([nvml], [dcgm, other]) == [dcgm, other]
    assert merge_findings([dcgm], [nvml]) == [dcgm]


# --- a page with no health series at all ---------------------------------------------------------------

NO_HEALTH = "exporter-3.3.x-h100-eks-temp-power-util-only.prom"


def test_a_page_with_only_temperature_power_and_utilisation_is_one_node_level_unknown() -> None:
    """A counters file trimmed to temperature, power and utilisation (as on an H100 EKS node): the page
    cannot say whether any GPU is healthy. One node-level unknown names the missing health series and
    where to enable them; no GPU is blamed."""
    (finding,) = findings_for_page(page(NO_HEALTH), None, ChecksConfig())

    assert (finding.code, finding.status, finding.action, finding.gpu) == (
        "DCGM_EXPORTER_NO_HEALTH_SERIES",
        Status.UNKNOWN,
        Action.NONE,
        None,
    )
    for named in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP", "DCGM_FI_DEV_XID_ERRORS"):
        assert named in finding.message
    for how in ("default-counters.csv", "-f", "DCGM_EXPORTER_COLLECTORS"):
        assert how in finding.message


def test_the_agent_judging_such_a_page_beside_nvml_adds_the_same_one_finding() -> None:
    """With NVML's snapshot (the agent's case) the GPUs are judged by NVML; the page adds one unknown."""
    gpus = parse_metrics(page(NO_HEALTH))
    snapshot = NodeSnapshot(node="n", gpus=[GpuSnapshot(index=g.index, uuid=g.uuid) for g in gpus])

    found = findings_for_page(page(NO_HEALTH), snapshot, ChecksConfig())

    assert [(f.code, f.gpu) for f in found] == [("DCGM_EXPORTER_NO_HEALTH_SERIES", None)]


def test_one_health_series_on_the_page_is_enough_to_judge_it() -> None:
    """A page that carries a health series (here the last-XID gauge, 0) is judged as usual: no finding."""
    extra = (
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-3f0b6c2a-91d4-7e58-0c1a-6b2d9e4f7a01"} 0\n'
    )
    assert findings_for_page(page(NO_HEALTH) + extra, None, ChecksConfig()) == []
