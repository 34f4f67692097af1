"""The check at the end of a test run: no served function of the run logged a pod's env value.

Every pod the builders make carries tests.fixtures.builders.SECRET in its env; every served
function's log (tests/support/harness/served.py, ALL_LOGS, gathered from every test worker)
is read once the last test has run, so the check covers the controllers and delivery rungs
too, whatever order the files ran in (tests/conftest.py calls it from pytest_sessionfinish).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixtures.builders import SECRET


@dataclass
class Checked:
    logs: int = 0
    lines: int = 0
    decisions: int = 0
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


def check(paths: list[Path], *, required: bool) -> Checked:
    """Read every log; a secret found, or a log gone before the check, is a problem. `required`
    (the whole run, `make test`): no log, or no decision line in any, is one too: the check
    would have proven nothing."""
    checked = Checked()
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
    if required and not checked.decisions:
        checked.problems.append(
            f"{checked.logs} served function log(s), {checked.lines} lines and not one decision line: "
            "the secrets check proved nothing"
        )
    return checked
