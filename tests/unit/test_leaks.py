"""The end-of-run secrets check (tests/support/leaks.py) can fail: a secret in a log, a log
gone, or a whole run with nothing to check."""

from __future__ import annotations

import json

from tests.fixtures.builders import SECRET
from tests.support import leaks

DECISION = json.dumps({"msg": "decision", "action": "delete", "name": "w-0"})


def test_a_log_with_a_pods_env_value_is_a_problem(tmp_path):
    clean, leaky = tmp_path / "clean.log", tmp_path / "leaky.log"
    clean.write_text(f"{DECISION}\n")
    leaky.write_text(f"{DECISION}\nenv: {SECRET}\n")
    checked = leaks.check([clean, leaky], required=True)
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
