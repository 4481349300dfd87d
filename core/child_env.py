"""The environment of the commands the agent runs (dcgmi, journalctl, nvidia-smi, recovery commands).

They get the agent's environment less its credentials: the aggregator token (``GPUHEALTH_AGGREGATOR_TOKEN``),
the Nomad token, and any variable whose name says it holds a secret. A recovery command is a program an
operator configured, often a vendor tool; it has no use for the agent's identity, and a child process that
logs or dumps its environment (core files, ``ps e``, crash reports) would otherwise leak it. A command
that needs a credential of its own reads it from a file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# Names that hold a credential: *_TOKEN, *_SECRET, *_PASSWORD, *_PASSWD, *_API_KEY, *_CREDENTIALS and their
# plain forms (NOMAD_TOKEN, VAULT_TOKEN, AWS_SECRET_ACCESS_KEY, GPUHEALTH_AGGREGATOR_TOKEN, ...).
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|PRIVATE_KEY)", re.IGNORECASE)


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) without the variables that hold credentials."""
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if not _SECRET_NAME.search(name)}
