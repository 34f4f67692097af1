"""The check at the end of a test run: nothing the run's functions wrote shows a pod's env
value, and a container's log text shows only in evidence stores that may hold it.

Every pod the builders and the test worlds make carries tests.fixtures.builders.SECRET in its
env, and every container log the real worlds' kwok serves starts with LOG_SECRET. What is
read once the last test has run (tests/conftest.py calls `check` from pytest_sessionfinish,
with what every test worker gathered, so every rung is covered whatever order files ran in):

* every served function's log (tests/support/harness/served.py, ALL_LOGS): neither value;
* every output a stack or a CloudEvents sink kept as it stopped (`keep`, OUTPUTS): the
  Kubernetes Events and evidence ConfigMaps of the stack's namespaces, the CloudEvents a sink
  received. No env value anywhere; the log line only in an evidence store, and only where the
  namespace's log settings allow it (PODSWEEPER_EVIDENCE_LOG_LINES, _LOGS_EXCLUDE_NAMESPACES,
  the Namespace's podsweeper.dev/evidence-logs: off).
"""

from __future__ import annotations

import itertools
import json
import tempfile
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from tests.fixtures.builders import LOG_SECRET, SECRET


class Output(StrEnum):
    EVENT = "Event"
    EVIDENCE = "evidence ConfigMap"
    CLOUDEVENT = "CloudEvent"


# This process's kept outputs: one JSON-lines file per stack or sink that kept some.
OUTPUTS: list[Path] = []
_lock = threading.Lock()
_directory: list[Path] = []
_numbers = itertools.count()


def keep(records: list[dict]) -> None:
    """Keep what a stack or sink saw for the end-of-run check: each record {"kind": Output,
    "where": text, "text": text, "logs_allowed": bool}."""
    if not records:
        return
    with _lock:
        if not _directory:
            _directory.append(Path(tempfile.mkdtemp(prefix="podsweeper-outputs-")))
        # Named by a count of its own, never by len(OUTPUTS): a test that swaps the list for one
        # of its own must not write over a file the run's list still holds.
        path = _directory[0] / f"{next(_numbers):05d}.jsonl"
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
        OUTPUTS.append(path)


@dataclass
class Checked:
    logs: int = 0
    lines: int = 0
    decisions: int = 0
    outputs: dict[str, int] = field(default_factory=dict)  # by Output
    evidence_with_log_text: int = 0
    problems: list[str] = field(default_factory=list)


def decision_lines(text: str) -> int:
    """How many of the log's lines are decision lines (the lines that name pods and jobs)."""
    count = 0
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            count += isinstance(item, dict) and item.get("msg") == "decision"
    return count


def check(paths: list[Path], *, required: bool, outputs: list[Path] | None = None) -> Checked:
    """Read every log and every kept output; an env value, log text where it may not be, or a
    log gone before the check is a problem. `required` (the whole run, `make test`): a check
    that saw no decision line, no output of a kind, or no evidence store holding log text is
    one too: it would have proven nothing."""
    checked = Checked(outputs={kind.value: 0 for kind in Output})
    for path in dict.fromkeys(paths):
        if not path.exists():
            checked.problems.append(f"{path}: a served function's log gone before it was checked")
            continue
        text = path.read_text(errors="replace")
        checked.logs += 1
        checked.lines += text.count("\n")
        checked.decisions += decision_lines(text)
        if SECRET in text:
            checked.problems.append(f"{path}: shows a pod's env value")
        if LOG_SECRET in text:
            checked.problems.append(f"{path}: shows a container's log text")
    for path in dict.fromkeys(outputs or []):
        for line in path.read_text().splitlines():
            _check_output(json.loads(line), checked)
    if required:
        if not checked.decisions:
            checked.problems.append(
                f"{checked.logs} served function log(s), {checked.lines} lines and not one decision line: "
                "the secrets check proved nothing"
            )
        for kind, count in checked.outputs.items():
            if not count:
                checked.problems.append(
                    f"no {kind} was kept to check: the secrets check proved nothing of them"
                )
        if not checked.evidence_with_log_text:
            checked.problems.append(
                "no evidence store held a container's log text: the log check proved nothing"
            )
    return checked


def _check_output(record: dict, checked: Checked) -> None:
    kind, where, text = record["kind"], record["where"], record["text"]
    checked.outputs[kind] = checked.outputs.get(kind, 0) + 1
    if SECRET in text:
        checked.problems.append(f"{kind} {where}: shows a pod's env value")
    if LOG_SECRET in text:
        if kind == Output.EVIDENCE and record["logs_allowed"]:
            checked.evidence_with_log_text += 1
        else:
            checked.problems.append(f"{kind} {where}: shows a container's log text where it may not")
