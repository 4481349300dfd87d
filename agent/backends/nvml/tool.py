"""Checks on real hardware: ``python -m agent.backends.nvml.seam --probe | --watch SECONDS | --snapshot``.

``--probe`` asks every NVML call gpuhealth uses and prints how each answered, ``--watch`` runs an
:class:`~agent.backends.nvml.xid_watcher.XidWatcher` for a while, ``--snapshot`` prints one v1 snapshot.
``tools/real_gpu_check.sh`` runs all three on a GPU node. (``python -m agent.backends.nvml.tool`` works
too; the seam module's ``__main__`` hands over to :func:`main`.)
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from agent.backends.nvml.backend import NvmlBackend
from agent.backends.nvml.reader import GpuLost, GpuReader, NvmlUninitialised, field_number, read_nvlink
from agent.backends.nvml.seam import (
    NVML_AGGREGATE_ECC,
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
    NVML_FI_DEV_MEMORY_TEMP,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_NVLINK_ERROR_DL_CRC_DATA,
    NVML_NVLINK_ERROR_DL_CRC_FLIT,
    NVML_NVLINK_ERROR_DL_RECOVERY,
    NVML_NVLINK_ERROR_DL_REPLAY,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    NVML_SUCCESS,
    NVML_TEMPERATURE_GPU,
    NVML_VOLATILE_ECC,
    NVMLError,
    NvmlLibrary,
    NvmlUnavailableError,
    error_code,
    error_name,
    nvml_text,
    nvmlEventTypeXidCriticalError,
    real_library,
)
from agent.backends.nvml.xid_watcher import XidWatcher
from core.logging import configure_logging
from core.snapshot import XidEvent


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """How one NVML call answered on this machine (printed as: scope, call, outcome, detail).

    ``scope`` and ``call`` never contain spaces, so a script can split the printed line on white space.
    """

    scope: str  # "system" or "gpu<index>"
    call: str
    outcome: str  # OK, or the NVML error name (NOT_SUPPORTED, FUNCTION_NOT_FOUND, GPU_IS_LOST, ...)
    detail: str = ""


_GPU_PROBES: Final[tuple[tuple[str, tuple[int, ...]], ...]] = (
    ("nvmlDeviceGetUUID", ()),
    ("nvmlDeviceGetName", ()),
    ("nvmlDeviceGetPciInfo", ()),
    ("nvmlDeviceGetPersistenceMode", ()),
    ("nvmlDeviceGetTemperatureV", (NVML_TEMPERATURE_GPU,)),
    ("nvmlDeviceGetTemperature", (NVML_TEMPERATURE_GPU,)),
    ("nvmlDeviceGetPowerUsage", ()),
    ("nvmlDeviceGetEnforcedPowerLimit", ()),
    ("nvmlDeviceGetCurrentClocksEventReasons", ()),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", ()),
    ("nvmlDeviceGetEccMode", ()),
    ("nvmlDeviceGetTotalEccErrors", (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)),
    ("nvmlDeviceGetTotalEccErrors", (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)),
    ("nvmlDeviceGetTotalEccErrors", (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)),
    ("nvmlDeviceGetTotalEccErrors", (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC)),
    ("nvmlDeviceGetRemappedRows", ()),
    ("nvmlDeviceGetRetiredPages", (NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,)),
    ("nvmlDeviceGetRetiredPages", (NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,)),
    ("nvmlDeviceGetRetiredPagesPendingStatus", ()),
    ("nvmlDeviceGetCurrPcieLinkGeneration", ()),
    ("nvmlDeviceGetCurrPcieLinkWidth", ()),
    ("nvmlDeviceGetMaxPcieLinkGeneration", ()),
    ("nvmlDeviceGetMaxPcieLinkWidth", ()),
    ("nvmlDeviceGetPcieReplayCounter", ()),
    ("nvmlDeviceGetNvLinkState", (0,)),
    ("nvmlDeviceGetNvLinkErrorCounter", (0, NVML_NVLINK_ERROR_DL_REPLAY)),
    ("nvmlDeviceGetNvLinkErrorCounter", (0, NVML_NVLINK_ERROR_DL_RECOVERY)),
    ("nvmlDeviceGetNvLinkErrorCounter", (0, NVML_NVLINK_ERROR_DL_CRC_FLIT)),
    ("nvmlDeviceGetNvLinkErrorCounter", (0, NVML_NVLINK_ERROR_DL_CRC_DATA)),
)

_PROBE_FIELDS: Final[tuple[tuple[str, int], ...]] = (
    ("NVML_FI_DEV_MEMORY_TEMP", NVML_FI_DEV_MEMORY_TEMP),
    ("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
)


def _describe(value: Any) -> str:
    """A short text for a probe answer: the bus id of a PCI info, short lists whole, long ones counted."""
    if hasattr(value, "busId"):
        return f"busId={nvml_text(value.busId)}"
    if isinstance(value, list | tuple):
        return repr(list(value)) if len(value) <= 4 else f"{len(value)} entries"
    if value is None or isinstance(value, int | float | str | bytes):
        return repr(nvml_text(value) or value)[:80]
    return type(value).__name__


def _probe_call(library: Any, scope: str, function: str, *args: Any) -> tuple[ProbeResult, Any]:
    call = getattr(library, function, None)
    label = f"{function}({','.join(map(str, args[1:]))})" if args[1:] else function
    if call is None:
        return ProbeResult(scope, label, "NOT_IN_BINDINGS"), None
    try:
        value = call(*args)
    except NVMLError as exc:
        return ProbeResult(scope, label, error_name(error_code(exc))), None
    return ProbeResult(scope, label, "OK", _describe(value)), value


def probe(library: NvmlLibrary | None = None) -> list[ProbeResult]:
    """Ask every NVML call gpuhealth uses, on every GPU, and say how each answered."""
    lib: Any = library if library is not None else real_library()
    init, _ = _probe_call(lib, "system", "nvmlInit")
    results = [init]
    if init.outcome != "OK":
        return results
    try:
        results.append(_probe_call(lib, "system", "nvmlSystemGetDriverVersion")[0])
        count_result, count = _probe_call(lib, "system", "nvmlDeviceGetCount")
        results.append(count_result)
        for index in range(count or 0):
            results.extend(_probe_gpu(lib, index))
    finally:
        lib.nvmlShutdown()
    return results


def _probe_gpu(lib: Any, index: int) -> list[ProbeResult]:
    scope = f"gpu{index}"
    handle_result, handle = _probe_call(lib, scope, "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return [handle_result]
    results = [_probe_call(lib, scope, name, handle, *args)[0] for name, args in _GPU_PROBES]
    results.extend(_probe_fields(lib, scope, handle))
    results.append(_probe_nvlink_count(lib, scope, handle, index))
    results.extend(_probe_events(lib, scope, handle))
    return results


def _probe_nvlink_count(lib: Any, scope: str, handle: Any, index: int) -> ProbeResult:
    label = "nvlink_links_read_by_backend"
    try:
        links = read_nvlink(GpuReader(lib, handle, index, node="probe"))
    except GpuLost:
        return ProbeResult(scope, label, "GPU_IS_LOST")
    except NvmlUninitialised:
        return ProbeResult(scope, label, "UNINITIALIZED")
    return ProbeResult(scope, label, "OK", "none: no NVLink" if links is None else f"{len(links)} links")


def _probe_fields(lib: Any, scope: str, handle: Any) -> list[ProbeResult]:
    results = []
    for name, field_id in _PROBE_FIELDS:
        outcome, fields = _probe_call(lib, scope, "nvmlDeviceGetFieldValues", handle, [field_id])
        label = f"nvmlDeviceGetFieldValues({name})"
        if fields is None:
            results.append(ProbeResult(scope, label, outcome.outcome))
            continue
        code = fields[0].nvmlReturn
        detail = "" if code != NVML_SUCCESS else f"value={field_number(fields[0])}"
        results.append(ProbeResult(scope, label, "OK" if code == NVML_SUCCESS else error_name(code), detail))
    return results


def _probe_events(lib: Any, scope: str, handle: Any) -> list[ProbeResult]:
    created, event_set = _probe_call(lib, scope, "nvmlEventSetCreate")
    if event_set is None:
        return [created]
    registered, _ = _probe_call(
        lib, scope, "nvmlDeviceRegisterEvents", handle, nvmlEventTypeXidCriticalError, event_set
    )
    lib.nvmlEventSetFree(event_set)
    return [created, ProbeResult(scope, "nvmlDeviceRegisterEvents(XidCriticalError)", registered.outcome)]


def watch(
    seconds: float, out: IO[str], library: NvmlLibrary | None = None, *, timeout_ms: int = 100
) -> dict[str, Any]:
    """Run an XidWatcher for ``seconds``, print each event as a JSON line, and return a summary."""
    events: queue.Queue[XidEvent] = queue.Queue()
    watcher = XidWatcher(library, sink=events, timeout_ms=timeout_ms)
    watcher.start()
    deadline = time.monotonic() + seconds
    count = 0
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                event = events.get(timeout=min(remaining, 0.1))
            except queue.Empty:
                continue
            count += 1
            out.write(event.model_dump_json() + "\n")
    finally:
        began = time.monotonic()
        stopped = watcher.stop()
        stop_s = time.monotonic() - began
    return {
        "watched_s": seconds,
        "registered_gpus": len(watcher.watched_uuids),
        "events": count,
        "stopped_cleanly": stopped,
        "stop_s": round(stop_s, 3),
    }


def main(
    argv: Sequence[str] | None = None, *, library: NvmlLibrary | None = None, out: IO[str] | None = None
) -> int:
    """``python -m agent.backends.nvml.seam``: probe the NVML calls, watch XIDs, or print one snapshot."""
    parser = argparse.ArgumentParser(prog="python -m agent.backends.nvml.seam", description=main.__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--probe", action="store_true", help="one line per NVML call: OK / NOT_SUPPORTED / error"
    )
    mode.add_argument(
        "--watch", type=float, metavar="SECONDS", help="watch XID events for SECONDS, then stop"
    )
    mode.add_argument("--snapshot", action="store_true", help="print one v1 snapshot of this node")
    parser.add_argument("--node", default="localhost", help="node name for --snapshot")
    parser.add_argument("--log-level", default="warning", help="debug, info, warning or error (to stderr)")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    stream = out if out is not None else sys.stdout
    if args.probe:
        results = probe(library)
        for result in results:
            stream.write(f"{result.scope:<7} {result.call:<72} {result.outcome:<18} {result.detail}\n")
        return 0 if results[0].outcome == "OK" else 3
    if args.watch is not None:
        if args.watch < 0:
            parser.error("--watch SECONDS must not be negative")
        try:
            summary = watch(args.watch, stream, library)
        except NvmlUnavailableError as exc:
            sys.stderr.write(f"xid watch: {exc}\n")
            return 3
        stream.write(json.dumps(summary) + "\n")
        return 0 if summary["stopped_cleanly"] else 1
    with NvmlBackend(library, node_name=args.node) as backend:
        snapshot = backend.snapshot()
    stream.write(snapshot.to_json() + "\n")
    return 3 if snapshot.nvml_error else 0


if __name__ == "__main__":
    raise SystemExit(main())
