"""The tables of README.md and docs/rules.md generated from the package's one home of a fact:
the rule registry (function/podsweeper/rules) and the kind table (function/podsweeper/kinds.py);
and the rule names a decision may carry in docs/schemas/decision.schema.json.

`python -m tests.support.tools.rule_tables` rewrites each table between its markers and the
schema's `rule` enum; the registry test (tests/unit/test_rule_registry.py) fails when a table
differs from what this makes, tests/unit/test_docs_recipes.py when the schema does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from podsweeper.kinds import TRAINING_KINDS
from podsweeper.rules import RULES

ROOT = Path(__file__).resolve().parents[3]
BEGIN = "<!-- rule table: generated from function/podsweeper/rules (python -m tests.support.tools.rule_tables) -->"
END = "<!-- end of rule table -->"
KINDS_BEGIN = "<!-- kind table: generated from function/podsweeper/kinds.py (python -m tests.support.tools.rule_tables) -->"
KINDS_END = "<!-- end of kind table -->"


def readme_table() -> str:
    rows = ["| rule | when | action |", "|---|---|---|"]
    rows += [f"| {spec.title} | {spec.when} | {spec.does} |" for spec in RULES]
    return "\n".join(rows)


def rules_page_table() -> str:
    rows = [
        "| rule | looks at | may decide | settings | Events | GPU waste counted |",
        "|---|---|---|---|---|---|",
    ]
    for spec in RULES:
        looks = "; ".join(looks.value for looks in spec.looks_at)
        actions = ", ".join(sorted(a.value for a in spec.actions))
        settings = ", ".join(f"`{name}`" for name in spec.settings) or "—"
        reasons = [r for r in (spec.warning_reason, spec.suspend_reason, spec.job_delete_reason) if r]
        events = ", ".join(f"`{r}`" for r in reasons) or "`PodsCleanedUp`"
        if spec.actions & {a for a in spec.actions if a.deletes} and reasons and not spec.job_delete_reason:
            events += ", `PodsCleanedUp`"
        rows.append(
            f"| [{spec.title}](#{spec.rule.value}) | {looks} | {actions} | {settings} | {events} | {spec.wasted} |"
        )
    return "\n".join(rows)


def kinds_table() -> str:
    """Every training kind podsweeper knows: the one list the docs show."""
    rows = [
        "| kind | group | plural | versions | replica specs | restartPolicy when a replica names none |",
        "|---|---|---|---|---|---|",
    ]
    for kind in TRAINING_KINDS:
        versions = ", ".join(f"`{v}`" for v in kind.versions)
        if kind.launcher is not None:
            versions += f" (`{'`, `'.join(kind.launcher.versions)}`: {kind.launcher.manager}'s)"
        if kind.chain is not None:
            specs, restart = "none: a [chain](#trainer-v2-trainjob--jobset--batch-job--pod)", "—"
        else:
            specs, restart = f"`{kind.replica_specs_key}`", f"`{kind.default_restart_policy}`"
        rows.append(f"| {kind.kind} | `{kind.group}` | `{kind.plural}` | {versions} | {specs} | {restart} |")
    return "\n".join(rows)


# (file, begin marker, end marker) -> the table between them
TABLES = {
    (ROOT / "README.md", BEGIN, END): readme_table,
    (ROOT / "docs" / "rules.md", BEGIN, END): rules_page_table,
    (ROOT / "docs" / "rules.md", KINDS_BEGIN, KINDS_END): kinds_table,
}


DECISION_SCHEMA = ROOT / "docs" / "schemas" / "decision.schema.json"


def rule_names() -> list[str]:
    """The rule names a decision may carry, in registry order."""
    return [spec.rule.value for spec in RULES]


def schema_with_rules(text: str) -> str:
    """The decision schema's text with its `rule` enum set to the registry's names."""
    schema = json.loads(text)
    schema["properties"]["rule"]["enum"] = rule_names()
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def between_markers(text: str, begin: str = BEGIN, end: str = END) -> str:
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[start:stop].strip("\n")


def rewrite(path: Path, table: str, begin: str = BEGIN, end: str = END) -> bool:
    text = path.read_text()
    start, stop = text.index(begin) + len(begin), text.index(end)
    new = f"{text[:start]}\n{table}\n{text[stop:]}"
    if new == text:
        return False
    path.write_text(new)
    return True


def main() -> int:
    for (path, begin, end), make in TABLES.items():
        changed = rewrite(path, make(), begin, end)
        print(
            f"{path.relative_to(ROOT)} ({begin.split(':')[0][5:]}): {'rewritten' if changed else 'up to date'}"
        )
    text = DECISION_SCHEMA.read_text()
    new = schema_with_rules(text)
    if new != text:
        DECISION_SCHEMA.write_text(new)
    print(f"{DECISION_SCHEMA.relative_to(ROOT)} (rule enum): {'rewritten' if new != text else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
