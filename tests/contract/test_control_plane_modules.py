"""The wrapper Go modules of the real control plane (tools/control-plane, docs/testing.md) stay consistent.

k8s.io/kubernetes replaces its staging modules with ./staging/... in its own go.mod; a module that requires it
must pin each of them to the published release of the same minor (v1.M.P -> v0.M.P), or go resolves
nothing. A bump of one without the others is caught here, before a 10-minute build fails.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WRAP = REPO / "tools" / "control-plane"
SCRIPT = REPO / "tools" / "build-control-plane.sh"


def test_every_staging_module_is_pinned_to_the_release_of_the_kubernetes_minor() -> None:
    text = (WRAP / "kube" / "go.mod").read_text()
    (version,) = re.findall(r"^require k8s\.io/kubernetes (v1\.\d+\.\d+)$", text, re.MULTILINE)
    staging = "v0." + version.removeprefix("v1.")
    replaces = re.findall(r"^\s+(k8s\.io/[\w-]+) => (k8s\.io/[\w-]+) (v\S+)$", text, re.MULTILINE)
    assert len(replaces) >= 30  # api, apimachinery, apiserver, client-go, component-base, ... (33 in 1.37)
    for module, target, pinned in replaces:
        assert (target, pinned) == (module, staging), module
    for needed in ("k8s.io/api", "k8s.io/apimachinery", "k8s.io/apiserver", "k8s.io/client-go"):
        assert needed in {module for module, _, _ in replaces}


def test_the_commands_are_imported_so_that_tidy_keeps_them() -> None:
    kube = (WRAP / "kube" / "tools.go").read_text()
    assert '_ "k8s.io/kubernetes/cmd/kube-apiserver"' in kube
    assert '_ "k8s.io/kubernetes/cmd/kube-controller-manager"' in kube
    assert '_ "go.etcd.io/etcd/server/v3"' in (WRAP / "etcd" / "tools.go").read_text()
    for module in ("kube", "etcd"):
        assert (WRAP / module / "go.sum").stat().st_size > 0, f"{module}: go.sum missing (go mod tidy)"


def test_the_build_script_is_valid_bash_and_executable() -> None:
    assert SCRIPT.stat().st_mode & 0o111
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
