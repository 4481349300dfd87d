#!/usr/bin/env bash
# Builds a real Kubernetes control plane for the tests: kube-apiserver, kube-controller-manager and etcd,
# from Go modules only (the Go module proxy), into a cache directory keyed by the wrapper modules.
#
#   tools/control-plane/kube/   requires k8s.io/kubernetes v1.37.2 and pins every k8s.io staging module
#                               (which k8s.io/kubernetes replaces with ./staging/...) to its v0.37.2 release
#   tools/control-plane/etcd/   requires go.etcd.io/etcd/server/v3 (the etcd command is that module's root)
# and, for the chart's dry-run tests, the ServiceMonitor and PodMonitor CRDs of the prometheus-operator
# module (fetched from the module proxy, checked against the Go checksum database) into <dir>/crds/.
#
# Prints one line per binary (and one for the CRD directory) on stdout, machine-readable:
#   etcd=/…/etcd
#   kube-apiserver=/…/kube-apiserver
#   kube-controller-manager=/…/kube-controller-manager
#   crds=/…/crds
# then calls tools/build-kube-stack.sh, which builds (or, with --check, finds) the rest of the stack into the
# same cache base: kube-scheduler, kwok and the JobSet, Kueue and Trainer managers, one line each.
# Progress goes to stderr. A warm cache (everything present) skips the build.
# With --check, nothing is built: the paths are printed when the cache is warm, else exit status 3.
#
# Environment:
#   GPUHEALTH_CONTROL_PLANE_CACHE   base cache directory
#                                   (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpuhealth/control-plane);
#                                   the binaries go to <base>/<key>/, key = hash of the wrapper go.mod/go.sum,
#                                   the Go version and this script's build flags
#   GO                              the go command (default: go on PATH, else /usr/local/go/bin/go)
#   GPUHEALTH_BUILD_JOBS            parallel compile jobs (go build -p; default 2)
#
# Cold build on 2 cores: about 10 minutes idle, 23 minutes with the cores shared (docs/testing.md); warm:
# well under a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The whole script is one function, read before it runs: editing this file during a build is safe.
main() {

WRAP="$ROOT/tools/control-plane"
KUBE_VERSION="v1.37.2"

log() { printf '[control-plane %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

GO="${GO:-}"
if [ -z "$GO" ]; then
  if command -v go > /dev/null; then GO="$(command -v go)"
  elif [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go
  else log "no go command found (set GO=/path/to/go; Go 1.26 or newer is needed)"; exit 2
  fi
fi
GO_VERSION="$("$GO" env GOVERSION)"
JOBS="${GPUHEALTH_BUILD_JOBS:-2}"

# What the binaries depend on: the wrapper modules, the toolchain and the flags below.
LDFLAGS_KUBE="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
-X k8s.io/component-base/version.gitTreeState=clean"
TAGS="notest,grpcnotrace"
PROM_OPERATOR="github.com/prometheus-operator/prometheus-operator@v0.85.0"
CRDS=(monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_podmonitors.yaml)
KEY="$( {
  cat "$WRAP/kube/go.mod" "$WRAP/kube/go.sum" "$WRAP/etcd/go.mod" "$WRAP/etcd/go.sum"
  printf '%s\n%s\n%s\n%s\n' "$GO_VERSION" "$LDFLAGS_KUBE" "$TAGS" "$PROM_OPERATOR"
} | sha256sum | cut -c1-16)"
BASE="${GPUHEALTH_CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuhealth/control-plane}"
DEST="$BASE/$KEY"
NAMES=(etcd kube-apiserver kube-controller-manager)

print_paths() {
  local n
  for n in "${NAMES[@]}"; do printf '%s=%s\n' "$n" "$DEST/$n"; done
  printf 'crds=%s\n' "$DEST/crds"
}

CHECK_ONLY=0
case "${1:-}" in
  --check) CHECK_ONLY=1 ;;
  "") ;;
  *) log "usage: $0 [--check]"; exit 2 ;;
esac

warm=1
for n in "${NAMES[@]}"; do [ -x "$DEST/$n" ] || warm=0; done
for c in "${CRDS[@]}"; do [ -f "$DEST/crds/$c" ] || warm=0; done
# The rest of the stack, after the control plane: with --check its lines for what is built (the control
# plane's status stands alone: the stack's tests skip on their own); otherwise built, and its failure is ours.
stack() {
  if [ "$CHECK_ONLY" = 1 ]; then
    "$ROOT/tools/build-kube-stack.sh" --check || true
  else
    "$ROOT/tools/build-kube-stack.sh"
  fi
}

if [ "$warm" = 1 ] && [ -f "$DEST/.complete" ]; then
  log "cache warm: $DEST"
  print_paths
  stack
  exit 0
fi
if [ "$CHECK_ONLY" = 1 ]; then
  log "not built yet: $DEST (run tools/build-control-plane.sh)"
  exit 3
fi

mkdir -p "$BASE"
STAGE="$(mktemp -d "$BASE/.build-$KEY.XXXXXX")"
chmod 755 "$STAGE"
HEARTBEAT=""
trap 'rm -rf "$STAGE"; [ -z "$HEARTBEAT" ] || kill "$HEARTBEAT" 2> /dev/null' EXIT

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
start=$SECONDS
# go build prints nothing while it compiles: say every minute that it is still at it.
( while sleep 60; do log "      ... still compiling ($((SECONDS - start)) s)"; done ) > /dev/null 2>&2 &
HEARTBEAT=$!
log "building into $DEST with $GO_VERSION, $JOBS jobs (a cold build takes a while; go fetches modules first)"

log "[1/4] etcd (go.etcd.io/etcd/server/v3)"
"$GO" build -C "$WRAP/etcd" -p "$JOBS" -tags "$TAGS" -ldflags "-s -w" \
  -o "$STAGE/etcd" go.etcd.io/etcd/server/v3
log "      etcd done after $((SECONDS - start)) s"

log "[2/4] kube-apiserver (k8s.io/kubernetes ${KUBE_VERSION})"
"$GO" build -C "$WRAP/kube" -p "$JOBS" -tags "$TAGS" -ldflags "$LDFLAGS_KUBE" \
  -o "$STAGE/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
log "      kube-apiserver done after $((SECONDS - start)) s"

log "[3/4] kube-controller-manager (k8s.io/kubernetes ${KUBE_VERSION})"
"$GO" build -C "$WRAP/kube" -p "$JOBS" -tags "$TAGS" -ldflags "$LDFLAGS_KUBE" \
  -o "$STAGE/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
log "      kube-controller-manager done after $((SECONDS - start)) s"

log "[4/4] CRDs of $PROM_OPERATOR"
local dir
dir="$(cd "$STAGE" && GOFLAGS= "$GO" mod download -json "$PROM_OPERATOR" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
mkdir -p "$STAGE/crds"
for c in "${CRDS[@]}"; do
  cp "$dir/example/prometheus-operator-crd/$c" "$STAGE/crds/$c"
  chmod 644 "$STAGE/crds/$c"
done

kill "$HEARTBEAT" 2> /dev/null || true
HEARTBEAT=""
touch "$STAGE/.complete"
rm -rf "$DEST"
mv "$STAGE" "$DEST"
trap - EXIT
log "built in $((SECONDS - start)) s: $(du -sh "$DEST" | cut -f1) in $DEST"
print_paths
stack
}

main "$@"
