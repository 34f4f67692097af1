"""The rule registry is the one home of a rule: this walks it and fails when a rule lacks
what every rule has (a unit test, a replay stream, a seeded bug, its docs, its table row).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from podsweeper.config import ENV_PREFIX, Settings
from podsweeper.decisions import Action, Rule
from podsweeper.replay import replay
from podsweeper.rules import BY_RULE, RULES, Looks
from tests.fixtures import scenarios
from tests.mutants.catalogue import MUTANTS
from tests.support.tools import rule_tables

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
IDS = [spec.rule.value for spec in RULES]

# The stream each rule is replayed on, and the settings it needs: `rule-<name>.jsonl` unless
# a recording of the real controllers shows it better.
STREAMS: dict[Rule, tuple[Path, dict]] = {
    Rule.FINISHED_TRAINJOB_RESTARTED: (FIXTURES / "recorded" / "trainer-failed-restarted.jsonl", {}),
    Rule.CRASH_LOOP: (FIXTURES / "rule-crash-loop.jsonl", {}),
    # Opt-in: replayed with its TTL on.
    Rule.EXPIRED_TRAINJOB: (
        FIXTURES / "rule-expired-trainjob.jsonl",
        {"trainjob_ttl_seconds": scenarios.EXPIRED_TTL_SECONDS},
    ),
}
# Rules no recorded stream can show, and why (their unit and real-world tests carry them).
NOT_REPLAYABLE = {
    Rule.STUCK_TERMINATING: "a stream carries no node facts: the replay counts every node Ready, "
    "and the rule never acts on a Ready node",
}


def module_of(rule: Rule) -> str:
    spec = BY_RULE[rule]
    check = next(c for c in (spec.on_pod, spec.on_job, spec.on_chain, spec.on_stuck) if c is not None)
    return check.__module__.rsplit(".", 1)[-1]


def test_every_rule_has_exactly_one_entry():
    assert sorted(spec.rule for spec in RULES) == sorted(Rule)
    assert len({spec.rule for spec in RULES}) == len(RULES)


@pytest.mark.parametrize("spec", RULES, ids=IDS)
def test_its_settings_are_real_settings(spec):
    fields = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    assert set(spec.settings) <= fields


@pytest.mark.parametrize("spec", RULES, ids=IDS)
def test_it_has_a_unit_test_named_after_it(spec):
    """At least one test in tests/unit says in its name which rule it checks."""
    snake = spec.rule.value.replace("-", "_")
    names = [
        node.name
        for path in (ROOT / "tests" / "unit").rglob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]
    assert any(snake in name for name in names), f"no tests/unit test named test_..{snake}.."


@pytest.mark.parametrize("spec", RULES, ids=IDS)
def test_it_has_a_seeded_bug(spec):
    """A mutant in the rule's own module: its checks are guarded by a test that fails."""
    module = f"rules/{module_of(spec.rule)}.py"
    assert any(m.path == module for m in MUTANTS), f"no mutant in {module} (tests/mutants/catalogue.py)"


@pytest.mark.parametrize("spec", RULES, ids=IDS)
def test_it_has_a_replay_stream_that_shows_it(spec):
    if spec.rule in NOT_REPLAYABLE:
        assert not (FIXTURES / f"rule-{spec.rule.value}.jsonl").exists(), "a stream exists: replay it"
        return
    path, settings = STREAMS.get(spec.rule, (FIXTURES / f"rule-{spec.rule.value}.jsonl", {}))
    assert path.exists(), f"no replay stream {path.relative_to(ROOT)} (tests/fixtures/scenarios.py)"
    run = replay([str(path)], Settings(**settings))
    decided = [a.decision for step in run.steps for a in step.outcome.applied]
    acted = [d for d in decided if d.rule is spec.rule and d.action is not Action.SKIP]
    assert acted, f"replaying {path.name} decides nothing for {spec.rule}"


@pytest.mark.parametrize("spec", RULES, ids=IDS)
def test_it_has_its_section_in_docs_rules(spec):
    text = (ROOT / "docs" / "rules.md").read_text()
    assert re.search(rf"^### `{re.escape(spec.rule.value)}`$", text, re.M), (
        f"no '### `{spec.rule}`' in rules.md"
    )


@pytest.mark.parametrize("spec", RULES, ids=IDS)
def test_its_events_are_in_the_operations_table(spec):
    text = (ROOT / "docs" / "operations.md").read_text()
    for reason in (spec.warning_reason, spec.suspend_reason):
        if reason is not None:
            assert f"| `{reason}` |" in text, f"no row for Event {reason} in docs/operations.md"


def test_the_readme_and_the_rules_page_tables_are_the_registry_and_the_kind_table():
    for (path, begin, end), make in rule_tables.TABLES.items():
        shown = rule_tables.between_markers(path.read_text(), begin, end)
        assert shown == make(), f"{path.name}: run python -m tests.support.tools.rule_tables"


def test_each_check_is_registered_for_what_it_looks_at():
    """A rule's entry says which passes call it; every pass shape has rules."""
    assert {looks for spec in RULES for looks in spec.looks_at} == set(Looks)


def test_streams_table_names_real_rules_and_files():
    for rule, (path, _) in STREAMS.items():
        assert rule in BY_RULE and path.exists()
        json.loads(path.read_text().splitlines()[0])
