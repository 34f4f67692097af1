"""Configuration: the defaults docs/configuration.md names; invalid values name the variable."""

from __future__ import annotations

import pytest

from podsweeper.config import load_settings
from podsweeper.errors import ConfigError


def test_defaults(monkeypatch):
    for name in ("NAMESPACES", "EXCLUDE_NAMESPACES", "DRY_RUN", "CRASHLOOP_ACTION"):
        monkeypatch.delenv(f"PODSWEEPER_{name}", raising=False)
    s = load_settings()
    assert (
        s.dry_run,
        s.sweep_active_pods,
        s.orphan_grace_seconds,
        s.operator_grace_seconds,
        s.crashloop_restarts,
        s.crashloop_action,
        s.max_deletes_per_event,
        s.event_timeout_seconds,
    ) == (True, True, 30, 30, 5, "warn", 100, 10.0)  # dry-run unless told: nothing live by surprise
    assert s.excluded_namespace_set == {"kube-system"} and s.namespace_set == frozenset()


def test_comma_lists(monkeypatch):
    monkeypatch.setenv("PODSWEEPER_NAMESPACES", " team-a, team-b ,")
    monkeypatch.setenv("PODSWEEPER_EXCLUDE_NAMESPACES", "")
    s = load_settings()
    assert s.namespace_set == {"team-a", "team-b"} and s.namespace_allowed("team-a")
    assert not s.namespace_allowed("team-c") and s.excluded_namespace_set == frozenset()


@pytest.mark.parametrize(
    "variable, value",
    [
        ("PODSWEEPER_CRASHLOOP_ACTION", "explode"),
        ("PODSWEEPER_MAX_DELETES_PER_EVENT", "0"),
        ("PODSWEEPER_ORPHAN_GRACE_SECONDS", "-1"),
        ("PODSWEEPER_OPERATOR_GRACE_SECONDS", "soon"),
        ("PODSWEEPER_DRY_RUN", "perhaps"),
        ("PODSWEEPER_EVENT_TIMEOUT_SECONDS", "abc"),
        ("PODSWEEPER_NAMESPACES", "team-a,Team_B"),
        ("PODSWEEPER_EXCLUDE_NAMESPACES", "kube-system,../x"),
    ],
)
def test_invalid_configuration_names_the_variable(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        load_settings()
