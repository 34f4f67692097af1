"""The alert rules and the dashboard's queries against the real Prometheus and promtool
(v0.316.0, built from Prometheus's Go module by tests/support/monitoring/build.py).

- `promtool check rules` accepts knative/monitoring/alerts.yaml;
- `promtool test rules` runs tests/delivery/alerts_test.yaml, where every alert fires on
  some series and stays quiet on others (test_monitoring_files.py checks that each is shown both ways);
- every dashboard query (Grafana's variables filled in), the namespace variable's query and
  every alert expression are accepted by a running Prometheus's HTTP API.
The same queries against live data from the whole stack: tests/controllers/test_monitoring_live.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.monitoring.prometheus import (
    ALERTS,
    ROOT,
    Prometheus,
    alert_expressions,
    dashboard_queries,
    grafana_expr,
    variable_queries,
)

ALERTS_TEST = Path(__file__).parent / "alerts_test.yaml"


def run(argv: list, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_promtool_check_rules(promtool):
    done = run([promtool, "check", "rules", ALERTS.relative_to(ROOT)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_expressions())} rules found" in done.stdout + done.stderr


def test_promtool_test_rules(promtool):
    done = run([promtool, "test", "rules", ALERTS_TEST.relative_to(ROOT)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_promtool_rejects_a_broken_rule(promtool, tmp_path):
    """The check above can fail: a rule whose expression does not parse is refused."""
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        ALERTS.read_text().replace("absent(podsweeper_event_handling_seconds_count)", "absent(", 1)
    )
    done = run([promtool, "check", "rules", broken])
    assert done.returncode != 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def empty_prometheus(prometheus_binary):
    with Prometheus(prometheus_binary) as prom:
        yield prom


def test_every_dashboard_and_alert_query_is_accepted(empty_prometheus):
    queries = [q for q in dashboard_queries()] + alert_expressions()
    assert len(queries) >= 15
    failed = {}
    for query in queries:
        answer = empty_prometheus.query(grafana_expr(query.expr))
        if answer.get("status") != "success" or answer.get("warnings"):
            failed[query.where] = answer
    assert failed == {}


def test_the_namespace_variable_is_accepted(empty_prometheus):
    variables = variable_queries()
    assert [name for name, _ in variables] == ["namespace"]
    for _, query in variables:
        assert empty_prometheus.label_values(query)["status"] == "success"


def test_a_broken_query_is_refused(empty_prometheus):
    """The acceptance above means something: Prometheus answers a bad expression with an error."""
    answer = empty_prometheus.query("sum by (rule) (rate(podsweeper_deletes_total[$__rate_interval]))")
    assert answer["status"] == "error" and answer["errorType"] == "bad_data", answer
