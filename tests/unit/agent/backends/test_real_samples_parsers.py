"""Real output pasted in public issue threads (tests/fixtures/real/README.md): each sample parses, and
yields what a person reading it would conclude."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import NamedTuple

import pytest
from dcgm_judge import findings_for_page
from repo_paths import FIXTURES

from agent.backends.dcgm.dcgmi_output import DcgmiOutputError, parse_diag
from agent.backends.dcgm.exporter import host_of, parse_metrics
from agent.backends.kernel_log import parse_kernel_log, parse_sxid_line
from agent.backends.kernel_log.fallen_off import MESSAGE as FALLEN_OFF_MESSAGE
from checks.config import ChecksConfig
from gpuhealth.cli.main import main

REAL = FIXTURES / "real"
SNAPSHOT = FIXTURES / "snapshots" / "h100-sxm-healthy.json"


def text(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


# --- dcgm-exporter pages -----------------------------------------------------------------------------------


class Page(NamedTuple):
    fixture: str
    uuids: list[str]
    host: str
    codes: set[str]


# The issue pastes keep only DCP series (utilisation): taken as it stands, such a page cannot tell a
# healthy GPU from a broken one, which is one node-level unknown, not a finding per GPU.
PAGES = [
    Page(
        "exporter-3.x-a30-mig-dcp-issue317.prom",
        ["GPU-265c9814-6156-355b-e589-ff2064894f16", "GPU-2d20791a-b4a6-ba59-97f1-e95b99fe5b49"],
        "yg-data-k8s-gpu-a30-node-test-test0003.mt",
        {"DCGM_EXPORTER_NO_HEALTH_SERIES"},
    ),
    Page(
        "exporter-3.4-a30-mig-empty-help-issue317.prom",
        ["GPU-886520a3-f4c4-4d1c-b5cc-655ca8b02758"],
        "hldy-data-k8s-gpu-a30-node0110.mt",
        {"DCGM_EXPORTER_NO_HEALTH_SERIES"},
    ),
    Page(
        "exporter-gpuop24.9-l40s-pods-dcgm226.prom",
        [
            "GPU-585834da-79ca-0599-5140-4ffdb131ae93",
            "GPU-8f8001ff-73ba-2e83-3cdc-4156ae4f3912",
            "GPU-5bd39b62-f1d2-21f3-d9d5-24cf8d513c73",
        ],
        "l40s.example.com",
        {"DCGM_EXPORTER_NO_HEALTH_SERIES"},
    ),
    Page(
        "exporter-pr239-xid-count-renamed-sample.prom",
        ["GPU-b9f9e81b-bee7-34bc-af17-132ef6592740"],
        "workstation",
        {"XID_42"},
    ),
]


@pytest.mark.parametrize("sample", PAGES, ids=[p.fixture for p in PAGES])
def test_real_exporter_page_names_its_gpus_host_and_expected_findings(sample: Page) -> None:
    """MIG instances fold into their GPU, the host label is read, and only a real fault becomes a finding."""
    page = text(sample.fixture)
    gpus = parse_metrics(page)
    assert [gpu.uuid for gpu in gpus] == sample.uuids
    assert host_of(gpus) == sample.host
    assert {finding.code for finding in findings_for_page(page, None, ChecksConfig())} == sample.codes


def test_xid_count_printed_under_its_pre_release_sample_name_is_still_counted() -> None:
    """PR 239's page declares DCGM_EXP_XID_ERRORS_COUNT but prints DCGM_FI_DEV_XID_ERRORS_ACTIVE samples."""
    (gpu,) = parse_metrics(text("exporter-pr239-xid-count-renamed-sample.prom"))
    assert gpu.xid_counts == {42: 1}


def test_pod_labels_on_some_gpus_only_keep_pci_addresses_of_all() -> None:
    """GPU Operator pages label only the GPUs a pod holds; every GPU keeps its pci_bus_id."""
    gpus = parse_metrics(text("exporter-gpuop24.9-l40s-pods-dcgm226.prom"))
    assert [gpu.pci_bus_id for gpu in gpus] == ["00000000:4E:00.0", "00000000:62:00.0", "00000000:C9:00.0"]


def test_a_page_of_thousands_of_mig_and_pod_lines_parses_quickly() -> None:
    """8 GPUs x 7 MIG instances x 60 DCP families (3,480 lines) built from a real line: well under a second."""
    real_line = text("exporter-gpuop24.9-l40s-pods-dcgm226.prom").splitlines()[2]
    labels = real_line[real_line.index("{") + 1 : real_line.index("}")].split(",", 2)[2]
    lines: list[str] = []
    for family in range(60):
        name = f"DCGM_FI_PROF_SAMPLE_{family}"
        lines += [f'# HELP {name} a \\\\ help text with "odd" characters.', f"# TYPE {name} gauge"]
        lines += [
            f'{name}{{gpu="{gpu}",UUID="GPU-{gpu:08d}",GPU_I_PROFILE="1g.10gb",GPU_I_ID="{mig}",{labels}}} 0.5'
            for gpu in range(8)
            for mig in range(7)
        ]
    page = "\n".join(lines) + "\n"
    started = time.perf_counter()
    gpus = parse_metrics(page)
    elapsed = time.perf_counter() - started
    assert len(page.splitlines()) == 3480 and len(gpus) == 8
    assert elapsed < 5.0  # a hang guard; it takes a few tens of milliseconds


# --- dcgmi diag --------------------------------------------------------------------------------------------


def test_nvvs_runtime_error_is_an_error_not_an_empty_passing_run() -> None:
    """A diagnostic that never ran (host engine unreachable) must not read as a run with nothing wrong."""
    with pytest.raises(DcgmiOutputError, match="did not run: Unable to get the driver version"):
        parse_diag(text("diag-nvvs-runtime-error-dcgm57.txt"))


def test_multi_node_runtime_error_at_the_top_level_is_an_error() -> None:
    """The multi-node form names the run with a string and puts runtime_error beside it."""
    document = '{"DCGM Diagnostic": "DCGM Multi-Node Diagnostic", "runtime_error": "no hosts answered"}'
    with pytest.raises(DcgmiOutputError, match="did not run: no hosts answered"):
        parse_diag(document)


@pytest.mark.parametrize("fixture", ["diag-text-3.0.4-r3-dcgm55.txt", "diag-text-4.2.3-metadata-dcgm253.txt"])
def test_plain_text_diag_table_is_one_clear_error_that_names_the_fix(fixture: str) -> None:
    """Users paste dcgmi's table; it is not graded (no guessing from ASCII art), and the error says why."""
    with pytest.raises(
        DcgmiOutputError, match=r"no JSON object in the output \(plain-text output\? run dcgmi with -j\)"
    ):
        parse_diag(text(fixture))


@pytest.mark.parametrize(
    "fixture",
    [
        "diag-nvvs-runtime-error-dcgm57.txt",
        "diag-text-3.0.4-r3-dcgm55.txt",
        "diag-text-4.2.3-metadata-dcgm253.txt",
    ],
)
def test_cli_reports_an_unusable_diag_file_in_one_line_with_exit_3(
    fixture: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpuhealth check --dcgmi-diag on these files: exit 3, nothing on stdout, one line naming the file."""
    code = main(["check", "--snapshot", str(SNAPSHOT), "--dcgmi-diag", str(REAL / fixture)])
    captured = capsys.readouterr()
    assert (code, captured.out) == (3, "")
    assert captured.err.count("\n") == 1 and fixture in captured.err and "Traceback" not in captured.err


# --- kernel logs -------------------------------------------------------------------------------------------


class Xid(NamedTuple):
    xid: int
    pci: str
    pid: int | None
    name: str | None
    message_start: str


LOGS: dict[str, list[Xid]] = {
    "kernel-relion436-syslog-kernel-stamp.txt": [
        Xid(13, "0000:41:00", None, None, "Graphics Exception: ESR 0x5067b0=0x9"),
        Xid(13, "0000:41:00", None, None, "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0)"),
        Xid(13, "0000:41:00", None, None, "Graphics SM Global Exception on (GPC 1, TPC 0, SM 0)"),
        Xid(13, "0000:41:00", None, None, "Graphics Exception: ESR 0x50c730=0x30009"),
        Xid(13, "0000:41:00", None, None, "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1)"),
        Xid(13, "0000:41:00", None, None, "Graphics SM Global Exception on (GPC 1, TPC 0, SM 1)"),
        Xid(13, "0000:41:00", None, None, "Graphics Exception: ESR 0x50c7b0=0x10009"),
        Xid(13, "0000:41:00", None, None, "Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0)"),
    ],
    "kernel-gpud46-dmesg-ctime.txt": [
        Xid(13, "0000:cb:00", None, None, "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0)"),
        Xid(13, "0000:cb:00", None, None, "Graphics SM Global Exception"),
        Xid(13, "0000:cb:00", None, None, "Graphics Exception: ESR 0x57c730=0xc04000b"),
        Xid(109, "0000:cb:00", 1797828, "pt_main_thread", "Ch 00000008, errorString CTX SWITCH TIMEOUT"),
    ],
    "kernel-vllm5901-dmesg-535.txt": [Xid(13, "0000:43:00", None, None, "Graphics Exception: ESR 0x52")] * 6,
    "kernel-bumblebee677-dmesg-2015.txt": [
        Xid(32, "0000:01:00", None, None, "Channel ID 00000000 intr 00004000"),
        Xid(32, "0000:01:00", None, None, "Channel ID 00000000 intr 00004000"),
        Xid(31, "0000:01:00", None, None, "Ch 00000003, engmask 00000101, intr 10000000"),
    ],
    "kernel-ogkm1150-journal-xid45.txt": [
        Xid(45, "0000:dc:00", 1818990, "python3", "Ch 00000001 caused by previous Xid 149"),
        Xid(45, "0000:ed:00", 1818992, "python3", "Ch 0000000c caused by previous Xid 145"),
        Xid(45, "0000:ba:00", 1818989, "python3", "Ch 00000002 caused by previous Xid 145"),
        Xid(45, "0000:97:00", 1818987, "python3", "Ch 00000003 caused by previous Xid 145"),
        Xid(45, "0000:dc:00", 1818990, "python3", "Ch 00000002 caused by previous Xid 149"),
        Xid(45, "0000:ba:00", 1818989, "python3", "Ch 00000003 caused by previous Xid 145"),
        Xid(45, "0000:ed:00", 1818992, "python3", "Ch 00000001 caused by previous Xid 145"),
    ],
    "kernel-gpud1160-1174-kmsg-nvlink5.txt": [
        Xid(144, "0000:01:00", None, None, "SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001"),
        Xid(149, "0000:00:00", None, None, "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6"),
        Xid(149, "0000:00:00", None, None, "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6"),
        Xid(149, "0019:01:00", None, None, "NETIR Fatal XC0 i0 Link -1 (0x000fe406"),
        Xid(145, "0018:01:00", None, None, "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2"),
        Xid(94, "0000:9b:00", 1234, "python3", "Contained ECC error"),
    ],
    "kernel-nvtrust124-dmesg-sxid-22013.txt": [],
    "kernel-gpud338-dmesg-iso-sxid-12028.txt": [],
    "kernel-nvsentinel155-dmesg-fallen-off-no-xid.txt": [
        Xid(79, "0000:b3:00.0", None, None, FALLEN_OFF_MESSAGE),
    ],
}


@pytest.mark.parametrize("fixture", sorted(LOGS))
def test_real_kernel_log_yields_exactly_the_xids_a_reader_sees(fixture: str) -> None:
    """XID, GPU address, process and message of every XID line; SXid and other NVRM lines yield none."""
    events = parse_kernel_log(text(fixture), year_hint=2024)
    found = [(e.xid, e.pci_bus_id, e.pid, e.process_name) for e in events]
    assert found == [(x.xid, x.pci, x.pid, x.name) for x in LOGS[fixture]]
    for event, expected in zip(events, LOGS[fixture], strict=True):
        assert event.source == "kernel_log"
        assert event.message is not None and event.message.startswith(expected.message_start)


def test_ctime_and_syslog_stamps_become_utc_times() -> None:
    """dmesg --ctime carries its year; a yearless syslog date takes the hint."""
    ctime = parse_kernel_log(text("kernel-gpud46-dmesg-ctime.txt"))
    assert ctime[-1].at == datetime(2024, 8, 30, 11, 43, 14, tzinfo=UTC)
    syslog = parse_kernel_log(text("kernel-relion436-syslog-kernel-stamp.txt"), year_hint=2018)
    assert syslog[0].at == datetime(2018, 2, 15, 17, 37, 45, tzinfo=UTC)


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("kernel-nvtrust124-dmesg-sxid-22013.txt", [(22013, 1, "0000:02:00.0")] * 5),
        ("kernel-gpud338-dmesg-iso-sxid-12028.txt", [(12028, 1, "0000:84:00.0")]),
    ],
)
def test_nvswitch_sxid_lines_are_switch_events_never_gpu_xids(
    fixture: str, expected: list[tuple[int, int, str]]
) -> None:
    """SXids carry the switch's address; they are read as SxidEvents and stay out of the GPU XIDs."""
    lines = text(fixture).splitlines()
    sxids = [event for line in lines if (event := parse_sxid_line(line)) is not None]
    assert [(s.sxid, s.switch, s.pci_bus_id) for s in sxids] == expected
    assert parse_kernel_log(text(fixture)) == []


def test_iso_sxid_stamp_with_comma_fraction_is_read() -> None:
    (line,) = text("kernel-gpud338-dmesg-iso-sxid-12028.txt").splitlines()
    event = parse_sxid_line(line)
    assert event is not None and event.at == datetime(2025, 1, 25, 10, 34, 54, 859532, tzinfo=UTC)


def test_fallen_off_message_after_an_xid_79_is_not_a_second_xid() -> None:
    """When the log already has an XID 79 the driver's follow-up wording adds nothing (already a reboot)."""
    log = "[  130.456257] NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.\n" + text(
        "kernel-nvsentinel155-dmesg-fallen-off-no-xid.txt"
    )
    assert [(e.xid, e.pci_bus_id) for e in parse_kernel_log(log)] == [(79, "0000:44:00")]


def test_single_line_fallen_off_message_without_xid_counts_once_per_gpu() -> None:
    """``NVRM: GPU <addr>: GPU has fallen off the bus.`` alone, twice for one GPU: one XID 79."""
    log = (
        "Feb 14 05:03:42 gpu-1 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
        "Feb 14 05:03:43 gpu-1 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
        "Feb 14 05:03:44 gpu-1 monitor[77]: NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.\n"
    )
    events = parse_kernel_log(log, year_hint=2026)
    assert [(e.xid, e.pci_bus_id, e.at) for e in events] == [
        (79, "0000:3b:00.0", datetime(2026, 2, 14, 5, 3, 42, tzinfo=UTC))
    ]


def test_probe_head_without_the_fallen_off_wording_is_not_an_xid() -> None:
    """``The NVIDIA GPU <addr>`` opens other probe messages too (unsupported GPU, no IRQ)."""
    log = (
        "[    5.1] NVRM: The NVIDIA GPU 0000:01:00.0\n"
        "          NVRM: (PCI ID: 10de:1b80) installed in this system is\n"
        "          NVRM: not supported by the NVIDIA 470.57 driver release.\n"
    )
    assert parse_kernel_log(log) == []


def test_cli_turns_a_fallen_off_message_without_xid_into_a_reboot(capsys: pytest.CaptureFixture[str]) -> None:
    """The NVSentinel sample through gpuhealth check: XID 79 on an unlisted address, node reboot."""
    code = main(
        [
            "check",
            "--snapshot",
            str(SNAPSHOT),
            "--kernel-log",
            str(REAL / "kernel-nvsentinel155-dmesg-fallen-off-no-xid.txt"),
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 2
    assert '"code": "XID_79"' in out and '"action": "reboot"' in out
