"""The end-of-run secrets check (tests/support/leaks.py) can fail: a secret in a log, a log
gone, or a whole run with nothing to check."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.builders import LOG_SECRET, SECRET
from tests.support import leaks

DECISION = json.dumps({"msg": "decision", "action": "delete", "name": "w-0"})


@pytest.fixture(autouse=True)
def own_outputs(monkeypatch):
    """What these tests keep on purpose (secrets included) stays out of the run's own check."""
    monkeypatch.setattr(leaks, "OUTPUTS", [])
    monkeypatch.setattr(leaks, "_directory", [])


def test_a_log_with_a_pods_env_value_is_a_problem(tmp_path):
    clean, leaky = tmp_path / "clean.log", tmp_path / "leaky.log"
    clean.write_text(f"{DECISION}\n")
    leaky.write_text(f"{DECISION}\nenv: {SECRET}\n")
    checked = leaks.check([clean, leaky], required=False)
    assert (checked.logs, checked.lines, checked.decisions) == (2, 3, 2)
    assert checked.problems == [f"{leaky}: shows a pod's env value"]


def test_a_log_gone_before_the_check_is_a_problem(tmp_path):
    checked = leaks.check([tmp_path / "gone.log"], required=False)
    assert checked.problems == [
        f"{tmp_path / 'gone.log'}: a served function's log gone before it was checked"
    ]


def test_a_whole_run_with_no_decision_line_proved_nothing(tmp_path):
    quiet = tmp_path / "quiet.log"
    quiet.write_text('{"msg": "serving"}\nnot json\n')
    assert not leaks.check([quiet], required=False).problems
    assert "proved nothing" in leaks.check([quiet], required=True).problems[0]
    assert "proved nothing" in leaks.check([], required=True).problems[0]


def test_each_log_is_read_once(tmp_path):
    log = tmp_path / "f.log"
    log.write_text(f"{DECISION}\n")
    assert leaks.check([log, log], required=True).decisions == 1


def _outputs(tmp_path, *records: dict):
    leaks.keep(list(records))
    return [leaks.OUTPUTS[-1]]


def _record(kind, text, logs_allowed=False):
    return {"kind": kind, "where": "ns/x", "text": text, "logs_allowed": logs_allowed}


def test_log_text_is_allowed_only_in_an_evidence_store_that_may_hold_it(tmp_path):
    fine = _outputs(
        tmp_path,
        _record(leaks.Output.EVIDENCE, f"run 1: {LOG_SECRET}", logs_allowed=True),
        _record(leaks.Output.EVENT, "PodsCleanedUp deleted 2 pod(s)"),
        _record(leaks.Output.CLOUDEVENT, '{"data": {}}'),
    )
    checked = leaks.check([], required=False, outputs=fine)
    assert not checked.problems
    assert checked.evidence_with_log_text == 1
    assert checked.outputs == {"Event": 1, "evidence ConfigMap": 1, "CloudEvent": 1}
    for kind, allowed in (
        (leaks.Output.EVIDENCE, False),
        (leaks.Output.EVENT, True),
        (leaks.Output.CLOUDEVENT, True),
    ):
        checked = leaks.check(
            [], required=False, outputs=_outputs(tmp_path, _record(kind, LOG_SECRET, allowed))
        )
        assert checked.problems == [f"{kind} ns/x: shows a container's log text where it may not"]


def test_an_env_value_is_a_problem_in_every_output(tmp_path):
    for kind in leaks.Output:
        checked = leaks.check([], required=False, outputs=_outputs(tmp_path, _record(kind, SECRET, True)))
        assert checked.problems == [f"{kind} ns/x: shows a pod's env value"]


def test_a_log_showing_a_containers_log_text_is_a_problem(tmp_path):
    log = tmp_path / "f.log"
    log.write_text(f"{DECISION}\n{LOG_SECRET}\n")
    assert leaks.check([log], required=False).problems == [f"{log}: shows a container's log text"]


def test_a_whole_run_must_have_checked_every_kind_of_output(tmp_path):
    log = tmp_path / "f.log"
    log.write_text(f"{DECISION}\n")
    only_events = _outputs(tmp_path, _record(leaks.Output.EVENT, "x"))
    problems = leaks.check([log], required=True, outputs=only_events).problems
    assert any("no evidence ConfigMap was kept" in p for p in problems)
    assert any("no CloudEvent was kept" in p for p in problems)
    assert any("no evidence store held a container's log text" in p for p in problems)


def test_a_swapped_list_never_writes_over_a_file_kept_before(tmp_path):
    """The run's list and a test's own list share the directory: a kept file is never reused."""
    leaks.keep([_record(leaks.Output.EVENT, "first")])
    first = leaks.OUTPUTS[-1]
    leaks.OUTPUTS.clear()  # as a test swapping the list in would
    leaks.keep([_record(leaks.Output.EVENT, "second")])
    assert leaks.OUTPUTS[-1] != first and "first" in first.read_text()
