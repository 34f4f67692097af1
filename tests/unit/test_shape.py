"""The shape of function/podsweeper, held by tests so it cannot drift back.

Imports go down the layers (an import-linter layers contract in pyproject.toml, run by `make
lint`); what a contract cannot see is held here: module sizes, the one acting handle, and the
sweep asking the rules what to nominate instead of knowing them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "function" / "podsweeper"
MAX_LINES = 300
REASON = "Over 300 lines, on purpose:"


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_300_lines_without_a_stated_reason(path):
    lines = path.read_text().count("\n")
    if lines <= MAX_LINES:
        return
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert REASON in doc, f"{path.name} has {lines} lines and its docstring states no reason ({REASON!r})"


def calls_of(path: Path) -> set[str]:
    """The names of the functions a module calls (plain names and attributes)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_only_the_actor_carries_decisions_out():
    """carry_out (the deletes, suspends and Events) is called from the actor alone: the passes,
    the sweep and the pipeline hand decisions to Actor.act."""
    callers = [p.relative_to(PACKAGE) for p in modules() if "carry_out" in calls_of(p)]
    assert callers == [Path("actor.py")], callers


def test_the_passes_and_the_routing_write_no_evidence():
    """Evidence is kept by the actor (through the keeper): routing and the passes only read."""
    for name in ("routing.py", "passes.py", "sweep/listing.py", "sweep/sweeper.py"):
        called = calls_of(PACKAGE / name)
        assert not called & {"keep", "write_evidence", "before_acting", "after_acting"}, name


def test_the_sweep_names_no_rule():
    """The sweep nominates through the rules' registry hooks (engine.nominated) and the pod
    checks: no rule module, and no rule's own helper, is imported by the sweep."""
    for path in (PACKAGE / "sweep").glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {
            node.module or ""
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("podsweeper.rules.")
        }
        assert not imported, f"{path.name} imports {imported}"
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
            n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
        }
        assert not names & {"made_again", "runs_on", "looks_stuck", "failed_unsettled_at"}, path.name
