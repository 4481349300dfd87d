"""Reading the Nomad job files with python-hcl2, for the deployment tests.

python-hcl2 parses the HCL syntax only; it evaluates nothing. Strings keep Nomad's own interpolations
(``${attr.kernel.name}``, ``${var.image}``) as text, blocks become lists of dicts, a labelled block becomes
a dict keyed by its label, and heredocs stay as written (``<<-EOT`` ... ``EOT``).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2
from repo_paths import REPO_ROOT

NOMAD_DIR = REPO_ROOT / "deploy" / "nomad"
AGENT_JOB = NOMAD_DIR / "gpuhealth-agent.nomad.hcl"
AGGREGATOR_JOB = NOMAD_DIR / "gpuhealth-aggregator.nomad.hcl"
AGENT_POLICY = NOMAD_DIR / "gpuhealth-agent.policy.hcl"
AGGREGATOR_POLICY = NOMAD_DIR / "gpuhealth-aggregator.policy.hcl"
REMEDIATOR_POLICY = NOMAD_DIR / "gpuhealth-remediator.policy.hcl"
TRAINING_EXAMPLE = NOMAD_DIR / "examples" / "training-job.nomad.hcl"
NOMAD_DOC = REPO_ROOT / "docs" / "nomad.md"

Body = dict[str, Any]

_OPTIONS = hcl2.SerializationOptions(
    with_comments=False, explicit_blocks=False, preserve_heredocs=True, strip_string_quotes=True
)
_HEREDOC = re.compile(r"\A<<(-?)([A-Za-z_][A-Za-z0-9_]*)\n(?P<body>.*?)\n[ \t]*\2\Z", re.DOTALL)
_VARIABLE_REF = re.compile(r"\A\$\{var\.([A-Za-z_][A-Za-z0-9_]*)\}\Z")


def load(path: Path) -> Body:
    """The parsed file (raises on a syntax error, naming the position)."""
    with path.open(encoding="utf-8") as handle:
        parsed: Body = hcl2.load(handle, serialization_options=_OPTIONS)
    return parsed


def labelled(blocks: list[Body]) -> dict[str, Body]:
    """``[{"label": body}, ...]`` (how labelled blocks are parsed) as one dict label -> body."""
    merged: dict[str, Body] = {}
    for block in blocks:
        for label, body in block.items():
            assert label not in merged, f"block {label!r} appears twice"
            merged[label] = body
    return merged


def one(blocks: list[Body]) -> Body:
    """The body of a block that must appear exactly once (an unlabelled one such as ``config``)."""
    assert len(blocks) == 1, f"expected one block, found {len(blocks)}"
    return blocks[0]


def job(parsed: Body) -> tuple[str, Body]:
    """The file's only job: its name and body."""
    jobs = labelled(parsed["job"])
    assert len(jobs) == 1
    return next(iter(jobs.items()))


def only_group(job_body: Body) -> tuple[str, Body]:
    groups = labelled(job_body["group"])
    assert len(groups) == 1
    return next(iter(groups.items()))


def only_task(group_body: Body) -> tuple[str, Body]:
    tasks = labelled(group_body["task"])
    assert len(tasks) == 1
    return next(iter(tasks.items()))


def resolve(parsed: Body, value: str) -> str:
    """``${var.NAME}`` replaced by the default of the file's ``variable "NAME"``; any other string as is."""
    match = _VARIABLE_REF.match(value)
    if match is None:
        return value
    variables = labelled(parsed.get("variable", []))
    default: str = variables[match.group(1)]["default"]
    return default


def heredoc_body(value: str) -> str:
    """The text of a heredoc string, as Nomad hands it to the task (``<<-`` removes the common indent)."""
    match = _HEREDOC.match(value)
    assert match is not None, f"not a heredoc: {value[:40]!r}"
    body = match.group("body")
    return textwrap.dedent(body) + "\n" if match.group(1) else body + "\n"


def without_template_actions(text: str) -> str:
    """A Go template with every line that holds an action (``{{ ... }}``) removed.

    The job files keep each action on lines of its own, so what remains is what the template renders when
    the optional parts (an aggregator service not registered yet) render nothing.
    """
    return "".join(line for line in text.splitlines(keepends=True) if "{{" not in line)


def walk_keys(node: Any) -> Iterator[str]:
    """Every key of every mapping, at any depth: to prove a block is absent anywhere in a file."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from walk_keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_keys(item)
