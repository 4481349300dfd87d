#!/usr/bin/env bash
# Real-hardware check of gpuhealth's NVML backend, for a machine with an NVIDIA GPU (written for an H200).
#
# Installs gpuhealth from this repository into a fresh virtual environment, then:
#   1. gpuhealth snapshot -o $OUT/h200-real.json   (and the module's own --snapshot as a cross-check)
#   2. gpuhealth check --json                         (live) and --snapshot of the file from step 1
#   3. python -m agent.backends.nvml.seam --probe           one line per NVML call: OK / NOT_SUPPORTED / error
#   4. python -m agent.backends.nvml.seam --watch 5         the XID event watcher for 5 s, then a prompt stop
#   5. the wall time of real snapshot() calls          (bench.snapshot measures only our overhead, on a fake)
# and prints a summary, including every NVML call that did not answer OK.
#
# Environment:
#   OUT=./out            where results go (created)
#   PYTHON=python3       interpreter for the virtual environment (3.11 or newer)
#   VENV=<tmp>/...       where the virtual environment goes (kept out of $OUT: it is large)
#   WHEELHOUSE=DIR       install offline from wheels in DIR (pip install --no-index --find-links DIR);
#                        build it elsewhere with: pip wheel -w DIR . hatchling (about 30 MB), using
#                        the same Python version as PYTHON here: pydantic-core and friends are binary
#   WATCH_SECONDS=5      how long the XID watcher runs
#   SNAPSHOT_RUNS=20     how many real snapshots to time
#
# Exit status: 0 when the install worked, NVML read at least one GPU and the watcher stopped cleanly;
# 1 otherwise (details in the summary and in $OUT).
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-./out}"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-${TMPDIR:-/tmp}/gpuhealth-real-check-venv}"
WATCH_SECONDS="${WATCH_SECONDS:-5}"
SNAPSHOT_RUNS="${SNAPSHOT_RUNS:-20}"

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
declare -A STATUS=()

step() { printf '\n=== %s\n' "$*"; }

# Run a command with its stdout into FILE and its stderr into FILE.stderr (shown), keep its exit status
# under NAME, never abort the script: exit statuses 1-3 of `gpuhealth check` are answers, not failures.
run_to() {
    local name="$1" file="$2"
    shift 2
    "$@" > "$file" 2> "$file.stderr"
    STATUS["$name"]=$?
    cat "$file.stderr"
    echo "[$name] exit ${STATUS[$name]} -> $file"
}

step "machine"
{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    uname -a
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,uuid --format=csv
} 2>&1 | tee "$OUT/machine.txt"

step "install gpuhealth into $VENV"
rm -rf "$VENV"
if ! "$PYTHON" -m venv "$VENV"; then
    echo "cannot create a virtual environment with $PYTHON" >&2
    exit 1
fi
PIP_ARGS=(--quiet --disable-pip-version-check)
if [[ -n "${WHEELHOUSE:-}" ]]; then
    PIP_ARGS+=(--no-index --find-links "$WHEELHOUSE")
fi
if ! "$VENV/bin/pip" install "${PIP_ARGS[@]}" "$REPO" 2>&1 | tee "$OUT/pip-install.txt"; then
    echo "pip install failed (offline? set WHEELHOUSE); see $OUT/pip-install.txt" >&2
    exit 1
fi
"$VENV/bin/pip" show nvidia-ml-py | grep -E '^(Name|Version)' | tee -a "$OUT/pip-install.txt"

# Run from $OUT so that the installed package is used, not the source tree.
cd "$OUT" || exit 1
GPUHEALTH="$VENV/bin/gpuhealth"
PY="$VENV/bin/python"

step "gpuhealth snapshot -o $OUT/h200-real.json"
run_to snapshot "$OUT/snapshot.stdout" "$GPUHEALTH" snapshot -o "$OUT/h200-real.json"
run_to module_snapshot "$OUT/module-snapshot.json" "$PY" -m agent.backends.nvml.seam --snapshot --node "$(hostname)"

step "gpuhealth check --json (live, then from the snapshot file)"
run_to check "$OUT/check-live.json" "$GPUHEALTH" check --json
cat "$OUT/check-live.json"
run_to check_file "$OUT/check-file.json" "$GPUHEALTH" check --snapshot "$OUT/h200-real.json" --json

step "NVML probe: how every call gpuhealth uses answers on this GPU"
run_to probe "$OUT/probe.txt" "$PY" -m agent.backends.nvml.seam --probe
cat "$OUT/probe.txt"

step "XID watcher for ${WATCH_SECONDS}s"
run_to watch "$OUT/xid-watch.jsonl" "$PY" -m agent.backends.nvml.seam --watch "$WATCH_SECONDS"
cat "$OUT/xid-watch.jsonl"

step "wall time of $SNAPSHOT_RUNS real snapshots"
run_to timing "$OUT/real-snapshot-timing.json" "$PY" - "$SNAPSHOT_RUNS" <<'PYTHON'
import json, statistics, sys, time
from agent.backends.nvml.backend import NvmlBackend
from core.logging import configure_logging

configure_logging("error")
runs = int(sys.argv[1])
durations = []
with NvmlBackend(node_name="real-timing") as backend:
    first = backend.snapshot()
    for _ in range(runs):
        began = time.perf_counter()
        backend.snapshot()
        durations.append(time.perf_counter() - began)
durations.sort()
print(json.dumps({
    "runs": runs,
    "gpus": len(first.gpus),
    "nvml_error": first.nvml_error,
    "median_ms": round(statistics.median(durations) * 1000, 3),
    "max_ms": round(durations[-1] * 1000, 3),
}))
PYTHON
cat "$OUT/real-snapshot-timing.json"

step "summary"
for name in snapshot module_snapshot check check_file probe watch timing; do
    printf '%-16s exit %s\n' "$name" "${STATUS[$name]:-not run}"
done
echo
echo "NVML calls that did not answer OK (scope, call, outcome):"
awk '$3 != "OK" {print "  " $1, $2, $3}' "$OUT/probe.txt"
echo
"$PY" - "$OUT/h200-real.json" "$OUT/xid-watch.jsonl" <<'PYTHON' || echo "(nothing to summarise: see the step outputs above)"
import json, sys
from core.snapshot import NodeSnapshot

snapshot = NodeSnapshot.model_validate_json(open(sys.argv[1]).read())
print(f"snapshot: {len(snapshot.gpus)} GPU(s), driver {snapshot.driver_version}, nvml_error={snapshot.nvml_error!r}")
for gpu in snapshot.gpus:
    empty = sorted(name for name, value in gpu.model_dump().items() if value is None)
    print(f"  gpu{gpu.index} {gpu.name} {gpu.pci_bus_id} lost={gpu.lost} null fields: {', '.join(empty) or 'none'}")
lines = open(sys.argv[2]).read().splitlines()
print(f"xid watch: {json.loads(lines[-1]) if lines else 'no summary (see xid-watch.jsonl.stderr)'}")
PYTHON
echo
echo "results in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"

SNAPSHOT_OK=$("$PY" -c "import json,sys; s=json.load(open(sys.argv[1])); print(int(bool(s['gpus']) and not s['nvml_error']))" "$OUT/h200-real.json" 2>/dev/null || echo 0)
if [[ "$SNAPSHOT_OK" == 1 && "${STATUS[watch]:-1}" == 0 ]]; then
    exit 0
fi
exit 1
