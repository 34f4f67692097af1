"""The upstream controllers' behaviour the rules assume was last proven on today's pins.

The tests marked `world_facts` run by `make world-facts`, not in every CI run; this check
makes a version bump without such a run fail CI (tests/support/world/facts.py)."""

from __future__ import annotations

from tests.support.world import facts


def test_the_world_facts_ran_on_the_pinned_versions():
    found = facts.recorded()
    assert found, f"{facts.FACTS} is missing: run make world-facts"
    assert found["versions"] == facts.pins(), (
        f"a pinned version changed since the world facts last passed (on {found['ran']}): "
        f"run make world-facts; recorded {found['versions']}, pinned {facts.pins()}"
    )
    assert found["passed"] > 0
