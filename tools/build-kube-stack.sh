#!/usr/bin/env bash
# Builds the rest of a real Kubernetes stack for the tests, beside tools/build-control-plane.sh (which calls
# this script): kube-scheduler, KWOK and the JobSet, Kueue and Trainer managers, from Go modules only (the Go
# module proxy), each with the manifests of the same module version (CRDs, RBAC, webhook configurations,
# default configuration; KWOK's stages), into the same cache base as the control plane.
#
#   kube-scheduler   tools/control-plane/kube/       k8s.io/kubernetes v1.37.2 (the control plane's wrapper)
#   kwok             tools/kube-stack/kwok/          sigs.k8s.io/kwok v0.8.0, cmd/kwok; kustomize/stage/
#   jobset           tools/kube-stack/jobset/        sigs.k8s.io/jobset v0.12.0 (the module root); config/
#   kueue            tools/kube-stack/kueue/         sigs.k8s.io/kueue v0.17.0, cmd/kueue; config/
#   trainer          tools/kube-stack/trainer/       github.com/kubeflow/trainer/v2 v2.0.0,
#                                                    cmd/trainer-controller-manager; manifests/
#
# Each component has a directory of its own, <base>/<component>-<key>/, key = hash of its wrapper
# go.mod/go.sum, the Go version, the build flags and the manifest directories taken: one that fails to build
# leaves the others usable, and a change to one wrapper rebuilds only that one. The manifests are copied
# from the module's directory in the Go module cache (`go mod download`, checked against go.sum), never
# written by hand.
#
# Prints one line per component that is built, machine-readable (the manifests lie beside the binary):
#   kube-scheduler=/…/kube-scheduler-<key>/kube-scheduler
#   kwok=/…/kwok-<key>/kwok                 (stages in …/kwok-<key>/stage/)
#   jobset=/…/jobset-<key>/jobset           (…/jobset-<key>/config/)
#   kueue=/…/kueue-<key>/kueue              (…/kueue-<key>/config/)
#   trainer=/…/trainer-<key>/trainer        (…/trainer-<key>/manifests/)
# Progress goes to stderr. A warm component is not rebuilt. With --check nothing is built: the built
# components are printed and the exit status is 3 when any is missing. Named components
# (e.g. `tools/build-kube-stack.sh kwok jobset`) limit the work to those.
#
# Environment: as tools/build-control-plane.sh (GPUHEALTH_CONTROL_PLANE_CACHE, GO, GPUHEALTH_BUILD_JOBS).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The whole script is one function, read before it runs: editing this file during a build is safe.
main() {

KUBE_VERSION="v1.37.2"
ALL=(kube-scheduler kwok jobset kueue trainer)

log() { printf '[kube-stack %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

GO="${GO:-}"
if [ -z "$GO" ]; then
  if command -v go > /dev/null; then GO="$(command -v go)"
  elif [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go
  else log "no go command found (set GO=/path/to/go; Go 1.26 or newer is needed)"; exit 2
  fi
fi
GO_VERSION="$("$GO" env GOVERSION)"
JOBS="${GPUHEALTH_BUILD_JOBS:-2}"
TAGS="notest,grpcnotrace"
LDFLAGS_KUBE="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
-X k8s.io/component-base/version.gitTreeState=clean"
BASE="${GPUHEALTH_CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuhealth/control-plane}"

# Per component: wrapper directory, module@version, package to build, ldflags, "module-dir:cache-dir" copies.
wrapper() {
  case "$1" in
    kube-scheduler) echo "$ROOT/tools/control-plane/kube" ;;
    *) echo "$ROOT/tools/kube-stack/$1" ;;
  esac
}
module() {
  case "$1" in
    kube-scheduler) echo "k8s.io/kubernetes@${KUBE_VERSION}" ;;
    kwok) echo "sigs.k8s.io/kwok@v0.8.0" ;;
    jobset) echo "sigs.k8s.io/jobset@v0.12.0" ;;
    kueue) echo "sigs.k8s.io/kueue@v0.17.0" ;;
    trainer) echo "github.com/kubeflow/trainer/v2@v2.0.0" ;;
  esac
}
package() {
  case "$1" in
    kube-scheduler) echo "k8s.io/kubernetes/cmd/kube-scheduler" ;;
    kwok) echo "sigs.k8s.io/kwok/cmd/kwok" ;;
    jobset) echo "sigs.k8s.io/jobset" ;;
    kueue) echo "sigs.k8s.io/kueue/cmd/kueue" ;;
    trainer) echo "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager" ;;
  esac
}
ldflags() {
  case "$1" in
    kube-scheduler) echo "$LDFLAGS_KUBE" ;;
    *) echo "-s -w" ;;
  esac
}
copies() {
  case "$1" in
    kwok) echo "kustomize/stage:stage" ;;
    jobset) echo "config/components:config" ;;
    kueue) echo "config/components:config" ;;
    trainer) echo "manifests/base:manifests" ;;
  esac
}
key() {
  local w
  w="$(wrapper "$1")"
  { cat "$w/go.mod" "$w/go.sum"
    printf '%s\n' "$1" "$GO_VERSION" "$(ldflags "$1")" "$TAGS" "$(package "$1")" "$(copies "$1")"
  } | sha256sum | cut -c1-16
}
dest() { echo "$BASE/$1-$(key "$1")"; }
warm() { [ -f "$(dest "$1")/.complete" ] && [ -x "$(dest "$1")/$1" ]; }

CHECK_ONLY=0
WANT=()
for arg in "$@"; do
  case "$arg" in
    --check) CHECK_ONLY=1 ;;
    kube-scheduler | kwok | jobset | kueue | trainer) WANT+=("$arg") ;;
    *) log "usage: $0 [--check] [kube-scheduler|kwok|jobset|kueue|trainer]..."; exit 2 ;;
  esac
done
[ "${#WANT[@]}" -gt 0 ] || WANT=("${ALL[@]}")

if [ "$CHECK_ONLY" = 1 ]; then
  local c missing=0
  for c in "${WANT[@]}"; do
    if warm "$c"; then printf '%s=%s\n' "$c" "$(dest "$c")/$c"; else missing=1; fi
  done
  [ "$missing" = 0 ] || { log "not built yet: some of ${WANT[*]} (run tools/build-kube-stack.sh)"; exit 3; }
  return 0
fi

mkdir -p "$BASE"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
local c failed=()
for c in "${WANT[@]}"; do
  if warm "$c"; then
    log "$c: cache warm ($(dest "$c"))"
    printf '%s=%s\n' "$c" "$(dest "$c")/$c"
    continue
  fi
  if build_one "$c"; then
    printf '%s=%s\n' "$c" "$(dest "$c")/$c"
  else
    failed+=("$c")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  log "failed: ${failed[*]}"
  exit 1
fi
}

# Builds one component into a staging directory, then moves it into place (never a half-built cache).
build_one() {
  local c="$1" stage start heartbeat dir pair from to
  stage="$(mktemp -d "$BASE/.build-$c.XXXXXX")"
  chmod 755 "$stage"
  start=$SECONDS
  ( while sleep 60; do log "      ... $c still compiling ($((SECONDS - start)) s)"; done ) > /dev/null 2>&2 &
  heartbeat=$!
  log "$c: building $(module "$c") ($(package "$c")) with $GO_VERSION, $JOBS jobs"
  if ! "$GO" build -C "$(wrapper "$c")" -p "$JOBS" -tags "$TAGS" -ldflags "$(ldflags "$c")" \
      -o "$stage/$c" "$(package "$c")"; then
    kill "$heartbeat" 2> /dev/null || true
    rm -rf "$stage"
    log "$c: build FAILED after $((SECONDS - start)) s"
    return 1
  fi
  kill "$heartbeat" 2> /dev/null || true
  if [ -n "$(copies "$c")" ]; then
    # The module's own directory (downloaded through the proxy, verified against the wrapper's go.sum).
    dir="$(cd "$(wrapper "$c")" && "$GO" list -m -f '{{.Dir}}' "$(module "$c" | cut -d@ -f1)")"
    for pair in $(copies "$c"); do
      from="${pair%%:*}" to="${pair#*:}"
      cp -R "$dir/$from" "$stage/$to"
      chmod -R u+w,go+rX "$stage/$to"
    done
  fi
  touch "$stage/.complete"
  rm -rf "$(dest "$c")"
  mv "$stage" "$(dest "$c")"
  log "$c: built in $((SECONDS - start)) s: $(du -sh "$(dest "$c")" | cut -f1) in $(dest "$c")"
}

main "$@"
