"""The rule tables of README.md and docs/rules.md, generated from the rule registry.

`python -m tests.support.tools.rule_tables` rewrites both between their markers; the registry test
(tests/unit/test_rule_registry.py) fails when either differs from what this makes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from podsweeper.rules import RULES

ROOT = Path(__file__).resolve().parents[3]
BEGIN = "<!-- rule table: generated from function/podsweeper/rules (python -m tests.support.tools.rule_tables) -->"
END = "<!-- end of rule table -->"


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
        reasons = [r for r in (spec.warning_reason, spec.suspend_reason) if r]
        events = ", ".join(f"`{r}`" for r in reasons) or "`PodsCleanedUp`"
        if spec.actions & {a for a in spec.actions if a.deletes} and reasons:
            events += ", `PodsCleanedUp`"
        rows.append(
            f"| [{spec.title}](#{spec.rule.value}) | {looks} | {actions} | {settings} | {events} | {spec.wasted} |"
        )
    return "\n".join(rows)


TABLES = {ROOT / "README.md": readme_table, ROOT / "docs" / "rules.md": rules_page_table}


def between_markers(text: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n")


def rewrite(path: Path, table: str) -> bool:
    text = path.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = f"{text[:start]}\n{table}\n{text[end:]}"
    if new == text:
        return False
    path.write_text(new)
    return True


def main() -> int:
    for path, make in TABLES.items():
        changed = rewrite(path, make())
        print(f"{path.relative_to(ROOT)}: {'rewritten' if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
