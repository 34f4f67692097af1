"""Figure 3: API requests per event, by class of event, against the contract's count.

Method: on the control plane (bench/scenes.py, `function_on_control_plane`) the benchmark
plays 30 PyTorchJobs of 8 pods through their life (and 10 jobs without backoffLimit), and
POSTs each write's CloudEvent to the served function as ApiServerSource would, built from the
object the API returned. The function's requests are counted from kube-apiserver's own
`apiserver_request_total` (verb, resource) before and after each batch of one class, with no
other client active: (3a) events that need no action, (3b) a finished job's event, (3c) a
new job without backoffLimit.

Baseline: the contract's count (docs/rules.md): 0; 1 GET + 1 LIST + 1 DELETE per pod + 1
Event; 1 GET + 1 Event.

Goal: exactly the contract (ratio 1.00 of it, and for 3b every pod deleted).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter

from bench.cluster import Play
from bench.harness import builders as b
from bench.measure import now, request_counts
from bench.report import Bound, Goal, Row, say
from bench.scenes import (
    REPLICAS,
    FunctionOnControlPlane,
    Poster,
    finish_leader,
    make_namespace,
    parallel,
    setup_job,
    succeed,
)

GOALS = {
    "3a": Goal(Bound.AT_MOST, 0, " requests"),
    "3b": Goal(Bound.AT_MOST, 1.0, " of contract", also="1 GET + 1 LIST + 1 DELETE/pod + 1 Event"),
    "3c": Goal(Bound.AT_MOST, 1.0, " of contract", also="1 GET + 1 Event"),
}


def _delta(cp, action) -> tuple[Counter, object]:
    before = request_counts(cp)
    result = action()
    time.sleep(0.5)  # let the API server finish recording the last request's metric
    after = request_counts(cp)
    delta = Counter({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})
    return delta, result


def _fmt(counts: Counter, per: int) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{verb} {res} {n / per:.2f}" for (verb, res), n in sorted(counts.items()))


def measure(scene: FunctionOnControlPlane, jobs: int = 30, no_limit_jobs: int = 10) -> list[Row]:
    cp, admin, server = scene.cp, scene.admin, scene.server
    namespace = make_namespace(admin, "bench-cost")
    op = Play(admin, namespace, node=None)
    poster = Poster(server)
    say(f"figure 3: creating {jobs} jobs x 8 pods (+{no_limit_jobs} without backoffLimit) in {namespace}")
    entries = parallel(lambda i: setup_job(op, f"churn-{i:03d}"), range(jobs))
    bare = parallel(
        lambda i: setup_job(op, f"nolimit-{i:03d}", backoff_limit=None, pods=False), range(no_limit_jobs)
    )
    quiet = [e for entry in entries for e in entry["events"]]
    quiet += parallel(lambda entry: finish_leader(op, entry), entries)
    finished = parallel(lambda entry: succeed(op, entry), entries)

    quiet_delta, _ = _delta(cp, lambda: [poster.post(e) for e in quiet])

    def timed_posts(events):
        out = []
        for event in events:
            t0 = time.perf_counter()
            poster.post(event)
            out.append(time.perf_counter() - t0)
        return out

    # The first events needing the API since the server started: the first one pays for
    # importing and configuring the kubernetes client (lazily, see function/service.py).
    warn_delta, warn_times = _delta(cp, lambda: timed_posts([e["events"][0] for e in bare]))
    done_delta, done_answers = _delta(
        cp, lambda: [poster.post(b.event("update", job, now())) for job in finished]
    )
    deleted = sum(a.get("deleted", 0) for a in done_answers)
    gone_events = [b.event("delete", pod, now()) for entry in entries for pod in entry["pods"]]
    gone_delta, _ = _delta(cp, lambda: [poster.post(e) for e in gone_events])
    quiet_total = quiet_delta + gone_delta
    n_quiet = len(quiet) + len(gone_events)

    pods_per_job = sum(REPLICAS.values())
    expected_done = Counter(
        {
            ("GET", "pytorchjobs"): jobs,
            ("LIST", "pods"): jobs,
            ("DELETE", "pods"): jobs * pods_per_job,
            ("POST", "events"): jobs,
        }
    )
    expected_warn = Counter({("GET", "pytorchjobs"): no_limit_jobs, ("POST", "events"): no_limit_jobs})
    say(f"figure 3: no-action {dict(quiet_total)}, finished {dict(done_delta)}, warn {dict(warn_delta)}")
    rows = [
        Row(
            "3a",
            f"API requests per no-action event ({n_quiet} events: job add/update, pod add/update/delete)",
            f"{sum(quiet_total.values()) / n_quiet:.2f} ({_fmt(quiet_total, n_quiet)})",
            "contract: 0",
            f"{sum(quiet_total.values())} requests in all",
            **GOALS["3a"].judge(sum(quiet_total.values())),
        ),
        Row(
            "3b",
            f"API requests per finished-job event ({jobs} PyTorchJobs, cleanPodPolicy All, 8 pods each)",
            _fmt(done_delta, jobs),
            f"contract: {_fmt(expected_done, jobs)}",
            f"{sum(done_delta.values()) / sum(expected_done.values()):.2f} of contract",
            **GOALS["3b"].judge(
                sum(done_delta.values()) / sum(expected_done.values()),
                done_delta == expected_done and deleted == jobs * pods_per_job,
            ),
        ),
        Row(
            "3c",
            f"API requests per new job without backoffLimit ({no_limit_jobs} jobs: no-backoff-limit warning)",
            _fmt(warn_delta, no_limit_jobs),
            f"contract: {_fmt(expected_warn, no_limit_jobs)}",
            f"{sum(warn_delta.values()) / max(1, sum(expected_warn.values())):.2f} of contract",
            **GOALS["3c"].judge(
                sum(warn_delta.values()) / max(1, sum(expected_warn.values())), warn_delta == expected_warn
            ),
        ),
    ]
    rows[2].notes.append(
        f"these are the server's first events needing the API: the very first took {warn_times[0] * 1e3:.0f} ms "
        f"(it imports and configures the kubernetes client on first use), the next ones "
        f"{statistics.median(warn_times[1:]) * 1e3:.0f} ms (median)."
    )
    rows[0].notes.append(
        "counted from kube-apiserver's apiserver_request_total (verb, resource) before and after each batch, "
        "with no other client active; each LIST is one page (limit 500). Events are POSTed by the "
        "benchmark, each built from the object the API returned for the write that caused it. "
        "Figures 3 and 4 serve the function with PODSWEEPER_OPERATOR_GRACE_SECONDS=0: their jobs use "
        "cleanPodPolicy All and no operator runs here, so the finished-job path is measured at once "
        "(by default podsweeper leaves such pods to the operator for 30 s)."
    )
    lists = done_delta.get(("LIST", "pods"), 0) / jobs
    if lists == 2:
        rows[1].notes.append(
            "the second LIST per pass is the pre-v1.6 label selector (group-name=kubeflow.org,job-name=<job>), "
            "added so legacy-labelled pods are found too: a label selector cannot OR two label sets. "
            "Suggested: LIST by the legacy labels only when the v1.6+ LIST finds no pod (one operator labels "
            "all of a job's pods alike), which brings the common case back to the contract's one LIST."
        )
    if deleted != jobs * pods_per_job:
        rows[1].notes.append(f"the function reported {deleted} deletes, expected {jobs * pods_per_job}")
    return rows
