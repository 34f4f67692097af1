"""The seeded bugs of `make mutants` still apply: a refactor that moves the code they patch is
noticed by every test run, not only when someone runs the (slow) mutant runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutants.catalogue import MUTANTS

PACKAGE = Path(__file__).resolve().parents[2] / "function" / "podsweeper"


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_patches_exactly_one_place(mutant):
    text = (PACKAGE / mutant.path).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.name}: its anchor is not found once in {mutant.path}"
    assert mutant.new != mutant.old


def test_a_lone_baseline_suite_of_test_ids_is_split_over_the_idle_copies_and_fails_if_a_part_fails():
    """CI's sample reruns only the property suite: both copies run a part of it at once, and
    the suite passes only if every part passed (a part that failed gives the verdict)."""
    from tests.mutants.__main__ import SuiteRun, Verdict, baseline_parts, joined
    from tests.mutants.catalogue import Suite

    parts = baseline_parts([Suite.PROPERTY], 2)
    assert [suite for suite, _ in parts] == [Suite.PROPERTY, Suite.PROPERTY]
    assert sorted(test for _, tests in parts for test in tests) == sorted(Suite.PROPERTY.value)
    assert all(tests for _, tests in parts)
    # A suite named by a folder is never split; with as many suites as copies, none is.
    assert baseline_parts([Suite.UNIT], 2) == [(Suite.UNIT, Suite.UNIT.value)]
    both = baseline_parts([Suite.PROPERTY, Suite.UNIT], 2)
    assert both == [(Suite.PROPERTY, Suite.PROPERTY.value), (Suite.UNIT, Suite.UNIT.value)]

    passed, failed = SuiteRun(Verdict.SURVIVED, "", 40.0), SuiteRun(Verdict.CAUGHT, "t::x", 12.0)
    assert joined([passed, passed]) == SuiteRun(Verdict.SURVIVED, "", 40.0)
    assert joined([passed, failed]) == SuiteRun(Verdict.CAUGHT, "t::x", 40.0)
