"""The benchmark's in-process harness still runs against the package as it is now: `make bench`
is not in CI, so a change to the package that breaks it would otherwise be found only by the
next person to measure (setup_logging lost its stream argument once, and figure 1 crashed)."""

from __future__ import annotations

from bench import measure
from bench import stream as streams
from podsweeper.report import decision_log


def test_figure_1s_path_runs_and_deletes_what_the_contract_says(capsys) -> None:
    measure.quiet_logging()
    result = measure.run_live(streams.build(4))
    assert result.events > 0
    assert result.deletes == result.expected_deletes > 0
    assert result.api_events > 0
    decision_log.info("a decision line")
    assert capsys.readouterr().out == "", "decision lines must not reach the benchmark's output"
