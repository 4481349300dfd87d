"""``gpuhealth evidence NODE [--gpu N] [-o FILE] [--dcgmi-diag FILE ...]``: one archive for a hardware return.

What a vendor asks for, gathered from the aggregator into one ``.tar.gz``:

* ``SUMMARY.txt`` — a short human summary on top: the GPU (index, serial, UUID, PCI address, VBIOS, driver),
  its incidents, the XIDs and SXids seen, its memory's state, the diagnostics run and the actions taken;
* ``identity.json`` — the node's GPUs (or the one chosen) as the last report named them;
* ``xid_timeline.json`` — every finding line naming an XID or an SXid, oldest first;
* ``incidents/<id>.json`` — each incident with its timeline and the GPU's readings around it: the
  aggregator's samples before it (``readings_before``), at its opening, during it, at its release and after
  (``readings_after_release``, the first samples after it, kept in its history);
* ``readings_now.json`` — the latest readings (clocks, power, PCIe, remapped rows, retired pages, ...);
* ``memory.json`` — remapped rows, retired pages and uncorrectable ECC, now and at each incident;
* ``diagnostics.json`` — the diagnostic requests and results in the history;
  ``diagnostics/dcgmi-diag-<event>.json`` — the raw ``dcgmi diag -j`` output the agent sent with each
  result (its last 64 KiB); ``diagnostics/raw-N.json`` — each saved output given with ``--dcgmi-diag``
  (a run from outside gpuhealth, or from an agent too old to send it);
* ``actions.json`` — the actions taken, requested and granted, each with who: the node's agent, the
  aggregator, or the person named in the history.

Nothing secret goes in: the token never does, and any value under a key that names a token, secret or
password, or any ``Bearer`` credential in a text, is replaced by ``[redacted]``.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import tarfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.aggregator_api import Event, IncidentDetail, NodeDetail
from core.redaction import redact, redact_text
from gpuhealth.cli.errors import CliError
from gpuhealth.cli.fleet_cmd import _client, _common_options
from gpuhealth.cli.guard import node_name

_XID = re.compile(r"^(XID_|SXID_|NVSWITCH_SXID)")
_MEMORY = (
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "remap_pending",
    "remap_failure",
    "retired_pages_single_bit",
    "retired_pages_double_bit",
    "retired_pages_pending",
    "ecc_aggregate_uncorrected",
)
_READINGS_AFTER = "incident_readings_after"  # aggregator/readings_ring.py: samples after a release
_ACTION_KINDS = ("action", "permit", "drain", "release", "quarantine", "diag", "incident", "repeat_offender")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``evidence`` to the command tree."""
    evidence = subparsers.add_parser(
        "evidence",
        parents=[_common_options()],
        help="write one archive for a hardware return: identity, XIDs, readings, diagnostics, actions",
    )
    evidence.add_argument("name", metavar="NODE", type=node_name)
    evidence.add_argument("--gpu", type=int, default=None, help="the GPU's index (default: every GPU)")
    evidence.add_argument(
        "-o", "--output", default=None, help="archive to write (default: NODE[-gpuN]-evidence.tar.gz)"
    )
    evidence.add_argument(
        "--dcgmi-diag",
        action="append",
        default=[],
        metavar="FILE",
        help="a saved `dcgmi diag -j` output to include raw (repeatable)",
    )
    evidence.set_defaults(handler=run_evidence)


def run_evidence(args: argparse.Namespace) -> int:
    """``gpuhealth evidence NODE``."""
    raw_diags = [_read_diag(path) for path in args.dcgmi_diag]
    with _client(args) as client:
        detail = client.node(args.name)
        events = client.events(node=args.name, limit=500, all_pages=True)
        incidents = [client.incident(summary.id) for summary in client.incidents(node=args.name)]
    files = build_evidence(
        detail, events, incidents, gpu=args.gpu, raw_diags=raw_diags, now=datetime.now(UTC)
    )
    suffix = f"-gpu{args.gpu}" if args.gpu is not None else ""
    output = Path(args.output or f"{args.name}{suffix}-evidence.tar.gz")
    write_archive(files, output, root=f"{args.name}{suffix}-evidence")
    if args.json:
        print(json.dumps({"archive": str(output), "files": sorted(files)}))
    else:
        print(f"wrote {output} ({len(files)} files); start with SUMMARY.txt")
    return 0


def _read_diag(path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CliError(f"{path}: cannot read the dcgmi diag output ({exc.strerror or exc})", 2) from exc
    try:
        json.loads(data)
    except ValueError as exc:
        raise CliError(f"{path}: not a `dcgmi diag -j` output (not JSON)", 2) from exc
    return data


def _json(value: Any) -> bytes:
    return (json.dumps(redact(value), indent=2, sort_keys=True, default=str) + "\n").encode()


_UUID = re.compile(r"GPU-[0-9a-fA-F-]{8,}")


def _concerns(event: Event, uuid: str | None) -> bool:
    """Whether a history line concerns the GPU: it names it, or it names no GPU at all (the node's steps,
    a quarantine, a reboot) -- only a line about other GPUs alone is left out."""
    if uuid is None:
        return True
    named = set(_UUID.findall(json.dumps(event.details, default=str) + " " + event.message))
    return not named or uuid in named


def build_evidence(
    detail: NodeDetail,
    events: list[Event],
    incidents: list[IncidentDetail],
    *,
    gpu: int | None,
    raw_diags: list[bytes],
    now: datetime,
) -> dict[str, bytes]:
    """The archive's files, by name (pure: the tests build one without an aggregator)."""
    gpus = [item for item in detail.gpus if gpu is None or item.index == gpu]
    if gpu is not None and not gpus:
        known = ", ".join(str(item.index) for item in detail.gpus) or "none"
        raise CliError(f"{detail.name} has no GPU {gpu} (its GPUs: {known})", 2)
    uuid = gpus[0].uuid if gpu is not None else None
    chosen = {item.uuid for item in gpus}
    identity = [
        {
            "index": item.index,
            "uuid": item.uuid,
            "serial": item.serial,
            "pci_bus_id": item.pci_bus_id,
            "model": item.name,
            "vbios": item.readings.vbios_version if item.readings else None,
            "driver": item.readings.driver_version if item.readings else None,
        }
        for item in gpus
    ]
    xids = [
        {"at": event.at, "incident": event.incident_id, "finding": finding}
        for event in events
        if event.kind == "findings"
        for finding in event.details.get("findings", [])
        if _XID.match(str(finding.get("code", ""))) and (uuid is None or finding.get("gpu") in (uuid, None))
    ]
    mine = [
        item for item in incidents if uuid is None or not item.gpus or uuid in {g.uuid for g in item.gpus}
    ]
    readings_at_open = {
        item.id: {key: value for key, value in _readings_at(item, "incident_opened").items() if key in chosen}
        for item in mine
    }
    now_readings = {
        item.uuid: item.readings.model_dump(mode="json", exclude_none=True) for item in gpus if item.readings
    }
    memory = {
        "now": {key: {f: r.get(f) for f in _MEMORY if f in r} for key, r in now_readings.items()},
        "at_incidents": {
            incident: {key: {f: r.get(f) for f in _MEMORY if f in r} for key, r in readings.items()}
            for incident, readings in readings_at_open.items()
        },
    }
    outputs = {
        event.id: (f"diagnostics/dcgmi-diag-{event.id}.json", str(event.details["output"]))
        for event in events
        if isinstance(event.details.get("output"), str)
    }
    diagnostics = [
        _dumped(event, outputs)
        for event in events
        if "diag" in event.kind or event.details.get("action") == "diag"
    ]
    actions = [
        {**_dumped(event, outputs), "by": _who(event)}
        for event in events
        if event.kind.startswith(_ACTION_KINDS) and _concerns(event, uuid)
    ]
    files: dict[str, bytes] = {
        "identity.json": _json({"node": detail.name, "orchestrator": detail.orchestrator, "gpus": identity}),
        "xid_timeline.json": _json(xids),
        "readings_now.json": _json(now_readings),
        "memory.json": _json(memory),
        "diagnostics.json": _json(diagnostics),
        "actions.json": _json(actions),
        "findings_now.json": _json(
            [
                f.model_dump(mode="json")
                for f in [*detail.findings, *detail.peer_findings]
                if uuid is None or f.gpu in (uuid, None)
            ]
        ),
    }
    recent = [sample.model_dump(mode="json") for sample in detail.recent_readings]
    for item in mine:
        at_release = {k: v for k, v in _readings_at(item, "incident_closed").items() if k in chosen}
        during = _samples_at(item, "incident_closed", "readings_during")
        if item.ended_at is None:  # still open: the ring's samples since it opened
            during = [sample for sample in recent if sample["incident_id"] == item.id]
        # after the release: the samples its history kept, else those the node's ring still holds
        after = [
            {"at": event.at.isoformat(), "incident_id": None, "readings": event.details.get("readings") or {}}
            for event in item.timeline
            if event.kind == _READINGS_AFTER
        ] or [
            sample
            for sample in recent
            if item.ended_at is not None and datetime.fromisoformat(sample["at"]) > item.ended_at
        ]
        files[f"incidents/{item.id}.json"] = _json(
            {
                **item.model_dump(mode="json"),
                "readings_before": _only(_samples_at(item, "incident_opened", "readings_before"), chosen),
                "readings_at_open": readings_at_open[item.id],
                "readings_during": _only(during, chosen),
                "readings_at_release": at_release,
                "readings_after_release": _only(after, chosen),
            }
        )
    for number, raw in enumerate(raw_diags, start=1):
        files[f"diagnostics/raw-{number}.json"] = _json(json.loads(raw))
    for name, output in outputs.values():
        files[name] = redact_text(output).encode()  # as dcgmi printed it (its last 64 KiB)
    summary = _summary(
        detail,
        identity=identity,
        xids=xids,
        incidents=mine,
        memory=memory,
        diagnostics=diagnostics,
        actions=actions,
        now=now,
    )
    return {"SUMMARY.txt": summary.encode(), **files}


def _readings_at(incident: IncidentDetail, kind: str) -> dict[str, Any]:
    """Every GPU's readings the history kept with the incident's opening or closing (``kind``)."""
    for event in incident.timeline:
        if event.kind == kind:
            found = event.details.get("readings")
            return found if isinstance(found, dict) else {}
    return {}


def _dumped(event: Event, outputs: dict[int, tuple[str, str]]) -> dict[str, Any]:
    """The history line, its raw diagnostic output replaced by the name of the file that holds it."""
    dumped = event.model_dump(mode="json")
    if event.id in outputs:
        details = {key: value for key, value in dumped["details"].items() if key != "output"}
        dumped["details"] = details | {"output_file": outputs[event.id][0]}
    return dumped


def _samples_at(incident: IncidentDetail, kind: str, key: str) -> list[dict[str, Any]]:
    """The ring's samples the history kept with the incident's opening or closing (``kind``)."""
    for event in incident.timeline:
        if event.kind == kind:
            found = event.details.get(key)
            return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []
    return []


def _only(samples: list[dict[str, Any]], chosen: set[str]) -> list[dict[str, Any]]:
    """Each sample with the chosen GPUs' readings only."""
    return [
        {**item, "readings": {k: v for k, v in (item.get("readings") or {}).items() if k in chosen}}
        for item in samples
    ]


def _who(event: Event) -> str:
    """Who did it, as the history says: a person or service named in a request, else the node's agent."""
    by = event.details.get("requested_by") or event.details.get("by")
    if by:
        return str(by)
    match = re.search(r"requested by ([^:]+):", event.message)
    if match:
        return match.group(1)
    if event.kind.startswith(("permit", "repeat_offender", "incident")):
        return "aggregator"
    return f"agent on {event.node}" if event.node else "aggregator"


def _summary(
    detail: NodeDetail,
    *,
    identity: list[dict[str, Any]],
    xids: list[dict[str, Any]],
    incidents: list[IncidentDetail],
    memory: dict[str, Any],
    diagnostics: list[dict[str, Any]],
    actions: list[dict[str, Any]],
    now: datetime,
) -> str:
    lines = [
        f"Evidence for a hardware return: node {detail.name}",
        f"Written {now:%Y-%m-%d %H:%M:%S} UTC by gpuhealth",
        "",
    ]
    for item in identity:
        lines.append(
            f"GPU {item['index']}: {item['model'] or 'unknown model'}, serial {item['serial'] or 'unknown'}, "
            f"UUID {item['uuid']}, PCI {item['pci_bus_id'] or 'unknown'}, "
            f"VBIOS {item['vbios'] or 'unknown'}, "
            f"driver {item['driver'] or 'unknown'}"
        )
    lines.append("")
    lines.append(f"Incidents: {len(incidents)}")
    for incident in incidents:
        end = f"released {incident.ended_at:%Y-%m-%d %H:%M:%S}" if incident.ended_at else "still open"
        lines.append(
            f"  {incident.id}: {', '.join(incident.reasons) or 'no reason'}; action {incident.action.value}; "
            f"opened {incident.started_at:%Y-%m-%d %H:%M:%S}, {end}"
        )
    codes = Counter(str(x["finding"].get("code")) for x in xids)
    lines.append(
        "XIDs and SXids seen: " + (", ".join(f"{c} x{n}" for c, n in sorted(codes.items())) or "none")
    )
    for key, values in memory["now"].items():
        shown = ", ".join(f"{name} {value}" for name, value in values.items()) or "not reported"
        lines.append(f"Memory now ({key}): {shown}")
    raw = sum(1 for item in diagnostics if "output_file" in item["details"])
    lines.append(
        f"Diagnostic lines in the history: {len(diagnostics)}, {raw} with dcgmi's raw output "
        "(diagnostics.json; raw outputs under diagnostics/)"
    )
    lines.append(f"Actions taken or requested: {len(actions)} (actions.json, each with who)")
    for action in actions[-5:]:
        lines.append(f"  {action['at']}: {action['message']} (by {action['by']})")
    lines.append("")
    lines.append(
        "Files: identity.json, xid_timeline.json, incidents/, readings_now.json, memory.json, "
        "diagnostics.json, actions.json"
    )
    return str(redact("\n".join(lines) + "\n"))


def write_archive(files: dict[str, bytes], output: Path, *, root: str) -> None:
    """Write ``files`` under ``root/`` into one gzip tar at ``output`` (one line on failure)."""
    try:
        with tarfile.open(output, "w:gz") as archive:
            for name, data in files.items():
                info = tarfile.TarInfo(f"{root}/{name}")
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                archive.addfile(info, io.BytesIO(data))
    except OSError as exc:
        raise CliError(f"{output}: cannot write the archive ({exc.strerror or exc})", 1) from exc
