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
