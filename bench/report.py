"""One table: every figure next to its baseline from the same run, as a ratio; each figure's
goal, and whether the run met it."""

from __future__ import annotations

import datetime as _dt
import enum
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class Bound(enum.Enum):
    AT_LEAST = ">="
    AT_MOST = "<="
    BELOW = "<"


@dataclass(frozen=True)
class Goal:
    """What a figure's measured number (usually a ratio to its same-run baseline) must reach.

    `also` names a condition judged beside the number (e.g. "one event"); `known_miss` says
    why a goal this code does not reach is not a failure of the run (docs/benchmarks.md has
    the analysis). A goal without it that is missed fails `python -m bench`.
    """

    bound: Bound
    limit: float
    unit: str = ""  # "of floor", "x no-op", " MB", ...
    also: str = ""
    known_miss: str = ""

    def text(self) -> str:
        return f"{self.bound.value} {self.limit:g}{self.unit}" + (f", {self.also}" if self.also else "")

    def met(self, measured: float) -> bool:
        if self.bound is Bound.AT_LEAST:
            return measured >= self.limit
        if self.bound is Bound.AT_MOST:
            return measured <= self.limit
        return measured < self.limit

    def judge(self, measured: float, also_ok: bool = True) -> dict[str, Any]:
        """Row fields for this goal and a measurement: `Row(..., ratio, **GOAL.judge(x))`."""
        return {
            "target": self.text(),
            "met": self.met(measured) and also_ok,
            "goal": self,
            "measured": measured,
        }


@dataclass
class Row:
    figure: str  # "1", "2a", ...
    what: str
    value: str  # podsweeper's figure
    baseline: str  # the baseline's figure, measured in the same run
    ratio: str  # podsweeper / baseline, as the row states it
    target: str = ""
    met: bool | None = None  # None: no target, or not measured
    notes: list[str] = field(default_factory=list)
    goal: Goal | None = None
    measured: float | None = None  # the number the goal judges
    crashed: bool = False  # the figure failed: nothing measured

    @property
    def verdict(self) -> str:
        return {True: "met", False: "**missed**", None: "-"}[self.met]

    @classmethod
    def not_measured(cls, figure: str, what: str, reason: str, crashed: bool = True) -> Row:
        return cls(figure, what, "not measured", "-", "-", "", None, [reason], crashed=crashed)


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):  # noqa: SIM115
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "?"
    try:
        for line in open("/proc/meminfo", encoding="utf-8"):  # noqa: SIM115
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": memory,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": f"{platform.system()} {platform.release()}",
        "load average at start": load,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
    }


def _commit() -> str:
    """The commit the run measured, and whether the tree had changes on top of it."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return (head or "?") + (" (with uncommitted changes)" if dirty else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[Row]) -> str:
    lines = [
        "| # | figure | podsweeper | baseline (same run) | ratio | target | |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            "| "
            + " | ".join(
                _cell(c) for c in (r.figure, r.what, r.value, r.baseline, r.ratio, r.target, r.verdict)
            )
            + " |"
        )
    return "\n".join(lines)


def text_table(rows: list[Row]) -> str:
    headers = ("#", "figure", "podsweeper", "baseline (same run)", "ratio", "target", "")
    table = [headers] + [
        (r.figure, r.what, r.value, r.baseline, r.ratio, r.target, r.verdict.strip("*")) for r in rows
    ]
    widths = [min(60, max(len(row[i]) for row in table)) for i in range(len(headers))]

    def wrap(text: str, width: int) -> list[str]:
        out, line = [], ""
        for word in text.split():
            if line and len(line) + 1 + len(word) > width:
                out.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        return out + [line] if line or not out else out

    lines = []
    for n, row in enumerate(table):
        cells = [wrap(c, w) for c, w in zip(row, widths)]
        for k in range(max(len(c) for c in cells)):
            lines.append("  ".join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths)))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_markdown(
    path,
    rows: list[Row],
    info: dict[str, str],
    preamble: str,
    sections: list[str],
    elapsed: float,
    command: str,
) -> None:
    machine_lines = "\n".join(f"- **{k}**: {v}" for k, v in info.items())
    notes = [f"- **{r.figure}** {n}" for r in rows for n in r.notes]
    text = "\n\n".join(
        [
            "# podsweeper benchmarks",
            preamble.strip(),
            f"Written by `{command}` in {elapsed:.0f} s on:\n\n{machine_lines}",
            markdown_table(rows),
            "## Notes per figure\n\n" + "\n".join(notes) if notes else "",
            *sections,
        ]
    )
    with open(path, "w", encoding="utf-8") as out:
        out.write(text.rstrip() + "\n")


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)
