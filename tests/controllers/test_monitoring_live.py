"""The dashboard and the alert rules on live data: the whole stack (control plane, the served
function, Knative's receive adapter; tests/support/stack through `make_stack`,
tests/controllers/conftest.py) plays the seed's experiment 2 while a real Prometheus
(tests/support/monitoring/build.py) scrapes the function's /metrics every second. Then every dashboard query and every alert expression goes through
Prometheus's HTTP API: each must succeed, and the ones about decisions, deletes and reclaimed
GPU-seconds must return data that agrees with what happened.

The dry-run variant: nothing is deleted, and after a PingSource sweep
podsweeper_leftover_gpus shows the GPUs the three crash-looping workers still hold.
"""

from __future__ import annotations

import sys
import time
from urllib.parse import urlsplit

from tests.controllers.test_scenarios import EVENTUALLY, SCALE, ping_event, uids, workers_of
from tests.support.monitoring.prometheus import (
    Prometheus,
    PrometheusError,
    alert_expressions,
    dashboard,
    dashboard_queries,
    grafana_expr,
    panels,
    variable_queries,
)
from tests.support.stack import observe
from tests.support.stack.players import Play, experiment_2

RULE = "finished-job-active-pod"  # what deletes experiment 2's workers (docs/rules.md)
GPUS_PER_WORKER = 1  # tests/fixtures/builders.py: requests and limits nvidia.com/gpu: 1
SCRAPED = 30.0  # seconds: bound for Prometheus to scrape what the function counted

# Panels whose every query must return data once the workers are deleted.
WITH_DATA = (
    "Decisions by rule and action",
    "Deletes by rule and result",
    "GPUs reclaimed (GPU-seconds per second), by namespace",
    "GPU-hours reclaimed since start, by namespace",
    "Event handling latency (p50, p99)",
    "Events by outcome",
    "Replicas scraped",
)


def _target(url: str) -> str:
    return urlsplit(url).netloc


def _by_labels(result: list[dict], *names: str) -> dict[tuple, float]:
    return {tuple(r["metric"].get(n) for n in names): float(r["value"][1]) for r in result}


def evaluate_everything(prom: Prometheus, namespace: str) -> dict[str, list[dict]]:
    """Every dashboard query (the namespace variable set to this test's namespace, and "All")
    and every alert expression: each must answer success with no warning. Returns the
    results by query (panel title and refId, or alert name)."""
    results, failed = {}, {}
    titles = {p["title"] for p in panels(dashboard())}
    assert set(WITH_DATA) <= titles, set(WITH_DATA) - titles
    for variables, suffix in (({"$namespace": namespace}, ""), ({}, " (All)")):
        for query in [*dashboard_queries(), *alert_expressions()]:
            answer = prom.query(grafana_expr(query.expr, variables))
            if answer.get("status") != "success" or answer.get("warnings"):
                failed[query.where + suffix] = answer
            else:
                results[query.where + suffix] = answer["data"]["result"]
    for name, query in variable_queries():
        answer = prom.label_values(query)
        assert answer["status"] == "success", answer
        results[f"variable {name}"] = answer["data"]
    assert failed == {}, failed
    return results


def test_seed_experiment_2_on_the_dashboard(make_stack, admin_api, core, namespace, prometheus_binary):
    stack = make_stack(world="players")
    with Prometheus(prometheus_binary, [_target(stack.function.url)]) as prom:
        prom.wait_for('up{job="podsweeper"} == 1', timeout=SCRAPED, what="the function scraped")
        play = Play(admin_api, namespace, scale=SCALE)
        out = experiment_2(play, until=34)
        workers = workers_of(out.pods)
        removal = observe.wait_gone(
            core, namespace, uids(out.pods, *workers), out.terminal_write, timeout=EVENTUALLY
        )
        assert removal.all_gone, f"workers left: {removal.remaining()}\n" + "\n".join(play.log)
        stack.function.wait_settled()  # the deletes' event is done: its counters are counted
        finished_to_gone = time.monotonic() - out.terminal_write

        selector = f'{{namespace="{namespace}",rule="{RULE}"}}'
        try:
            prom.wait_for(f"podsweeper_reclaimed_gpu_seconds_total{selector}", timeout=SCRAPED)
            prom.wait_for(
                f'podsweeper_deletes_total{{rule="{RULE}",result="deleted"}} >= {len(workers)}',
                timeout=SCRAPED,
            )
        except PrometheusError as error:
            metrics = stack.function.url + "/metrics"
            raise AssertionError(f"{error}\n(the function's own {metrics} counted the deletes?)") from None
        time.sleep(3)  # a few more scrapes: the rate() windows hold two samples or more

        results = evaluate_everything(prom, namespace)
        for title in WITH_DATA:
            for key in (k for k in results if k.startswith(f"panel {title!r}")):
                assert results[key], f"{key} returned no data"

        deletes = _by_labels(results["panel 'Deletes by rule and result' A"], "rule", "result")
        assert (RULE, "deleted") in deletes, deletes
        decisions = _by_labels(results["panel 'Decisions by rule and action' A"], "rule", "action")
        assert (RULE, "delete") in decisions, decisions
        total = _by_labels(results["panel 'GPU-hours reclaimed since start, by namespace' A"], "namespace")
        reclaimed = total[(namespace,)] * 3600
        # Three one-GPU workers, each held from the job's Succeeded until its deletion.
        bound = len(workers) * GPUS_PER_WORKER * (finished_to_gone + 2.0)
        assert 0 <= reclaimed <= bound, (reclaimed, bound)
        assert namespace in results["variable namespace"]
        assert results["alert PodsweeperAbsent"] == [], "the function is scraped"
        assert results["alert PodsweeperErrors"] == []
        print(
            f"\nmonitoring: {len(workers)} workers deleted, {reclaimed:.3f} GPU-seconds reclaimed "
            f"(bound {bound:.1f}); {len(results)} queries evaluated",
            file=sys.stderr,
        )


def test_dry_run_shows_the_leftover_gpus(make_stack, admin_api, core, namespace, prometheus_binary):
    stack = make_stack(world="players", env={"PODSWEEPER_DRY_RUN": "true"})
    with Prometheus(prometheus_binary, [_target(stack.function.url)]) as prom:
        prom.wait_for('up{job="podsweeper"} == 1', timeout=SCRAPED, what="the function scraped")
        play = Play(admin_api, namespace, scale=SCALE)
        out = experiment_2(play, until=34)
        workers = workers_of(out.pods)
        stack.function.wait_settled()
        response = stack.function.post(ping_event())
        assert response.status_code == 200, response.text
        expected = len(workers) * GPUS_PER_WORKER
        leftover = prom.wait_for(
            f'max by (namespace, rule) (podsweeper_leftover_gpus{{namespace="{namespace}",rule="{RULE}"}})'
            f" == {expected}",
            timeout=SCRAPED,
            what=f"{expected} leftover GPUs",
        )
        assert len(leftover) == 1
        for uid in uids(out.pods, *workers):
            assert observe.present(core, namespace, uid), "dry-run deletes nothing"
        prom.wait_for('podsweeper_deletes_total{result="dry-run"}', timeout=SCRAPED)
        time.sleep(3)

        results = evaluate_everything(prom, namespace)
        panel = _by_labels(results["panel 'Leftover GPUs by namespace and rule' A"], "namespace", "rule")
        assert panel[(namespace, RULE)] == expected, panel
        # The alert's condition holds now; it fires once that lasts 15 minutes.
        held = _by_labels(results["alert PodsweeperLeftoverGPUs"], "namespace", "rule")
        assert held[(namespace, RULE)] == expected, held
        deletes = _by_labels(results["panel 'Deletes by rule and result' A"], "rule", "result")
        assert (RULE, "dry-run") in deletes and (RULE, "deleted") not in deletes, deletes
        print(
            f"\nmonitoring (dry-run): podsweeper_leftover_gpus{{rule={RULE!r}}} = {panel[(namespace, RULE)]:g}"
            f" for {len(workers)} workers kept; {len(results)} queries evaluated",
            file=sys.stderr,
        )
