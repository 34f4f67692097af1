"""knative/monitoring/ as a user loads it, checked without Prometheus: the dashboard imports with
its data source as an input, every alert says what to do and links a section of
docs/operations.md that exists, and tests/delivery/alerts_test.yaml makes every alert both
fire and stay quiet."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.support.monitoring.prometheus import ROOT, alert_rules, dashboard, dashboard_queries, panels

DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
OPERATIONS = ROOT / "docs" / "operations.md"
ALERTS_TEST = Path(__file__).parent / "alerts_test.yaml"


def github_anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_dashboard_takes_its_prometheus_as_an_input():
    board = dashboard()
    assert board["schemaVersion"] >= 39
    assert [(i["name"], i["type"], i["pluginId"]) for i in board["__inputs"]] == [
        ("DS_PROMETHEUS", "datasource", "prometheus")
    ]
    assert board["uid"] == "podsweeper" and board["id"] is None
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(board):
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for var in board["templating"]["list"]:
        assert var["datasource"] == DATASOURCE, var["name"]


def test_dashboard_covers_what_operators_ask():
    exprs = "\n".join(q.expr for q in dashboard_queries())
    for needle in (
        "sum by (rule, action) (rate(podsweeper_decisions_total",
        "sum by (rule, result) (rate(podsweeper_deletes_total",
        "sum by (namespace) (rate(podsweeper_reclaimed_gpu_seconds_total",
        "sum by (namespace) (podsweeper_reclaimed_gpu_seconds_total",
        "max by (namespace, rule) (podsweeper_leftover_gpus",
        "histogram_quantile(0.5, sum by (le) (rate(podsweeper_event_handling_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(podsweeper_event_handling_seconds_bucket",
        'podsweeper_events_total{outcome="api_unavailable"}',
        'podsweeper_events_total{outcome="bad_request"}',
        'podsweeper_deletes_total{result="deferred"}',
    ):
        assert needle in exprs, needle


def test_every_alert_says_what_to_do_and_links_the_runbook():
    headings = {
        github_anchor(line.lstrip("#"))
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("#")
    }
    rules = alert_rules()
    assert len(rules) >= 5
    for rule in rules:
        name = rule["alert"]
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], name
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), name
        path, _, anchor = notes["runbook"].partition("#")
        assert path == "docs/operations.md" and anchor == name.lower(), name
        assert anchor in headings, f"docs/operations.md has no section for {name}"
        assert notes["runbook"] in notes["description"], name


def test_every_alert_is_tested_firing_and_quiet():
    names = {rule["alert"] for rule in alert_rules()}
    fires, quiet = set(), set()
    for case in yaml.safe_load(ALERTS_TEST.read_text())["tests"]:
        for check in case.get("alert_rule_test") or []:
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert names - fires == set(), "never shown firing"
    assert names - quiet == set(), "never shown quiet"
    assert (fires | quiet) - names == set(), "tests for alerts that do not exist"
