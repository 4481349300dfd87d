"""Make ``health_readings`` importable by the test modules here and in ``tests/unit/remediation``.

The suite runs with ``--import-mode=importlib``, under which test modules cannot import their siblings; the
module is loaded once here (conftest files load before the modules they serve) and registered by name.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "health_readings"

if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name(f"{_NAME}.py"))
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)
