"""The recipes of docs/development.md list exactly the files a new kind or rule touches.

"Exactly" is counted, not promised: a file outside tests/ that lists every training-operator
kind (by kind or plural) is one a new such kind must be added to, and a file that lists every
rule (by name or module) is one a new rule must be added to. Each recipe's numbered files must
be those, plus what it says it is for besides (the rule's own new module; the count of named
cases a kind adds to). The decision schema's rule names are generated and checked here too.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from podsweeper import kinds
from podsweeper.rules import RULES
from tests.support.tools import rule_tables

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "development.md"
# Files a recipe lists that name no kind or rule of today: the new rule's own module, and the
# page quoting how many named cases the generator reaches (test_guarantees_page checks it).
KIND_EXTRA = {"docs/guarantees.md"}
RULE_EXTRA = {"function/podsweeper/rules/<name>.py"}
# Files that list them but are written by a run, not by hand.
WRITTEN_BY_A_RUN = {"docs/mutants.md": "make mutants"}


def section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def numbered_files(text: str) -> list[str]:
    """The path each numbered item of a recipe starts with."""
    return re.findall(r"^\d+\. `([^`]+)`", text, flags=re.MULTILINE)


def files_outside_tests() -> list[Path]:
    """The tracked files outside tests/, examples/ and bench/ (caches and build output a
    working tree holds are nobody's recipe). A copy that is not a git work tree (the seeded-bug
    runner's) holds only tracked files, and what its runs write."""
    skip = {"tests", "examples", "bench"}
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode == 0:
        paths = [ROOT / line for line in tracked.stdout.splitlines()]
    else:
        skip |= {"__pycache__", "out", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}
        skip |= {".grimp_cache", ".import_linter_cache", "podsweeper.egg-info"}
        paths = list(ROOT.rglob("*"))
    return [p for p in paths if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts)]


def listing(every: list[tuple[str, ...]]) -> set[str]:
    """The files outside tests/ that name each item (by any of its spellings)."""
    found = set()
    for path in files_outside_tests():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if all(any(word in text for word in spellings) for spellings in every):
            found.add(str(path.relative_to(ROOT)))
    return found - set(WRITTEN_BY_A_RUN)


def test_the_kind_recipe_lists_every_file_that_lists_the_kinds():
    recipe = section("How to add a training kind")
    files = numbered_files(recipe)
    count = re.search(r"is these (\d+) files", recipe)
    assert count is not None and int(count[1]) == len(files) == len(set(files))
    one_version = [k for k in kinds.OPERATOR_KINDS if len(k.versions) == 1]
    assert one_version, "no kind of the training operator's to count by"
    lists_them = listing([(k.kind, k.plural) for k in one_version])
    assert set(files) == lists_them | KIND_EXTRA, (
        f"listed, listing no kind: {sorted(set(files) - lists_them - KIND_EXTRA)}; "
        f"listing the kinds, not in the recipe: {sorted(lists_them - set(files))}"
    )


def test_the_rule_recipe_lists_every_file_that_lists_the_rules():
    files = numbered_files(section("How to add a rule"))
    module = {spec.rule.value: spec.rule.value.replace("-", "_") for spec in RULES}
    lists_them = listing([(name, module[name]) for name in module])
    assert set(files) == lists_them | RULE_EXTRA, (
        f"listed, listing no rule: {sorted(set(files) - lists_them - RULE_EXTRA)}; "
        f"listing the rules, not in the recipe: {sorted(lists_them - set(files))}"
    )


def test_every_file_a_recipe_lists_exists():
    for title in ("How to add a training kind", "How to add a rule"):
        for name in numbered_files(section(title)):
            assert "<name>" in name or (ROOT / name).exists(), f"{title}: {name}"


def test_the_decision_schema_names_the_registrys_rules():
    text = rule_tables.DECISION_SCHEMA.read_text()
    assert text == rule_tables.schema_with_rules(text), "run python -m tests.support.tools.rule_tables"
