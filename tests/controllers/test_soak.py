"""The soak: an hour (`make soak`; `make soak SOAK_SECONDS=180` for three minutes) of churn on
the real world, judged from the API server's audit log (tests/controllers/soak/). Marked `soak`:
a long run, it has its own target and is not in `make test`.

Training operator v1.9.4, controller manager (its garbage collector orphans or removes a
deleted job's pods), scheduler, kwok; Knative's real adapter and mtping. Two function
instances behind one round-robin front (tests/support/spread.py), as a Service spreads its
pods; one of them killed at intervals and started again on its port. Users create a job
every few seconds of four kinds and every cleanPodPolicy, a third crash-looping, some
deleted mid-run (orphaning their pods or with them), some re-created under the same name.

Judged at the end: no DELETE of the function that the rules did not name for the version
it deleted (judge.py), every pod the rules name gone within FINAL_BOUND of the churn's end,
no answer from the function other than 2xx/4xx and 503.

Settings (environment): PODSWEEPER_SOAK_SECONDS (180), PODSWEEPER_SOAK_KILL_EVERY (120),
PODSWEEPER_SOAK_TICK_SECONDS (20), PODSWEEPER_SOAK_SEED (random, printed).
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import time
from collections import Counter

import pytest

from tests.controllers.soak.churn import LEAD, Churn
from tests.controllers.soak.judge import Graces, still_named, wrong_deletes
from tests.controllers.soak.timeline import ACTIVE, Timeline
from tests.support import audit, figures
from tests.support.harness.waiting import wait_for
from tests.support.stack import Stack
from tests.support.stack.finish import finish_stacks
from tests.support.stack.users import KINDS

SECONDS = float(os.environ.get("PODSWEEPER_SOAK_SECONDS", "180"))
KILL_EVERY = float(os.environ.get("PODSWEEPER_SOAK_KILL_EVERY", "120"))
TICK_SECONDS = int(os.environ.get("PODSWEEPER_SOAK_TICK_SECONDS", "20"))  # mtping: 1 to 59, or 60
TICK = f"*/{TICK_SECONDS} * * * * *" if TICK_SECONDS < 60 else "0 * * * * *"
SEED = int(os.environ.get("PODSWEEPER_SOAK_SEED") or secrets.randbits(32))
GRACES = Graces(orphan=3.0, operator=5.0)
EVERY = 2.0  # seconds between two new jobs
FINAL_BOUND = TICK_SECONDS + 40.0  # from the churn's end to the last named pod gone: one tick, graces, slack
FUNCTION_ANSWERS = {200, 202, 204, 400, 404, 413, 415, 422, 429, 503}  # 502: the front, an instance gone
NODES = 3
# Its own bound, not the controllers rung's 900 s: the churn, the final wait (FINAL_BOUND + 30)
# and ten minutes for the judge and the report on a busy machine.
pytestmark = [pytest.mark.soak, pytest.mark.timeout(SECONDS + FINAL_BOUND + 30 + 600)]


@pytest.fixture(scope="module")
def world(receive_adapter):
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.world.launcher import World

    with ControlPlane(audit=True, log=sys.stderr) as cp, World(cp, nodes=NODES, log=sys.stderr) as w:
        yield w


def test_soak_nothing_wrong_deleted_nothing_named_left(request, world):
    print(
        f"soak: seed {SEED} (again: PODSWEEPER_SOAK_SEED={SEED}), {SECONDS:.0f}s", file=sys.stderr, flush=True
    )
    env = {
        "PODSWEEPER_ORPHAN_GRACE_SECONDS": f"{GRACES.orphan:g}",
        "PODSWEEPER_OPERATOR_GRACE_SECONDS": f"{GRACES.operator:g}",
    }
    stack = Stack(
        world.control_plane, f"soak-{secrets.token_hex(3)}", world=world, function_env=env, instances=2
    )
    timeline = None
    failed = True
    try:
        stack.start()
        timeline = Timeline(stack.admin_api, stack.namespace, {KINDS[k][0]: k for k in LEAD}).start()
        stack.start_ping(TICK)
        churn = Churn(stack, timeline, seed=SEED, seconds=SECONDS, every=EVERY, kill_every=KILL_EVERY)
        churn.run()
        ended = time.monotonic()
        from kubernetes import client

        core = client.CoreV1Api(stack.admin_api)
        left: dict[str, str] = {}

        def nothing_named() -> bool:
            left.clear()
            left.update(still_named(core, stack.namespace, timeline, GRACES, time.time()))
            return not left

        wait_for(f"every pod the rules name gone: {left}", nothing_named, FINAL_BOUND + 30, 1.0)
        settled = time.monotonic() - ended
        # What the audit log holds now, judged on the watches once they have caught up to it.
        writes = audit.writes(stack.cp.audit_log, namespace=stack.namespace)
        caught_up = timeline.sync(deleted_versions(writes))
        print(f"soak: the watches caught up in {caught_up:.2f}s", file=sys.stderr, flush=True)
        timeline.stop()
        wrong, by_rule = wrong_deletes(writes, timeline, GRACES)
        answers = stack.spread.by_status()
        report(stack, churn, timeline, writes, by_rule, answers, settled)
        assert figures.within("soak: wrong deletes", len(wrong), "==", 0), "\n".join(wrong[:40])
        assert figures.within(
            "soak: s from the churn's end to the last named pod gone", settled, "<=", FINAL_BOUND
        ), f"{settled:.1f}s"
        odd = {code: n for code, n in answers.items() if code not in FUNCTION_ANSWERS and code != 502}
        assert figures.within("soak: answers other than 2xx, 4xx, 503", sum(odd.values()), "==", 0), odd
        assert by_rule, "the soak deleted nothing: it proves nothing"
        failed = False
    finally:
        if timeline is not None:
            timeline.stop()
        failed = failed or bool(getattr(getattr(request.node, "rep_call", None), "failed", False))
        finish_stacks([stack], failed)


def report(stack, churn, timeline, writes, by_rule, answers, settled) -> None:
    """Print the soak's figures and record them (out/…figures.json: docs/guarantees.md)."""
    deletes = Counter(w.code for w in writes if w.verb == "delete")
    latencies = finish_to_gone(timeline)
    rss = rss_drift(churn)
    lines = [
        f"jobs created {dict(churn.created)}; fates {dict(churn.fates)}",
        f"pods seen {len(timeline.pods)}; jobs seen {len(timeline.jobs)}; watch re-lists {timeline.relists}",
        f"function DELETE answers {dict(deletes)}; removals by rule {dict(by_rule)}",
        f"answers through the front {dict(sorted(answers.items()))}",
        f"kills {[(i, round(s, 2)) for i, s in churn.kills]}",
        f"finish -> last active pod gone (cleanPodPolicy None), s: {summary(latencies)}",
        f"RSS per instance since its last start, MiB (first, last): {rss}",
        f"settled {settled:.1f}s after the churn",
    ]
    print("soak: " + "\nsoak: ".join(lines), file=sys.stderr, flush=True)
    figures.add("soak: jobs created", sum(churn.created.values()))
    figures.add("soak: pods seen", len(timeline.pods))
    figures.add("soak: function deletes judged", sum(deletes.values()))
    figures.add("soak: pods removed by the function", sum(by_rule.values()))
    figures.add("soak: events answered", sum(n for code, n in answers.items() if code < 300))
    figures.add("soak: 503 answers (the API unavailable)", answers.get(503, 0))
    figures.add("soak: 502 from the front (an instance killed)", answers.get(502, 0))
    figures.add("soak: function kills", len(churn.kills))
    if latencies:
        figures.add("soak: finish to last active pod gone, p50 ms", int(statistics.median(latencies) * 1000))
        figures.add("soak: finish to last active pod gone, max ms", int(max(latencies) * 1000))


def deleted_versions(writes) -> set[tuple[str, str]]:
    """(uid, resourceVersion) of each pod version the function's DELETEs named."""
    found = set()
    for write in writes:
        preconditions = (write.body or {}).get("preconditions") or {}
        if write.verb == "delete" and preconditions.get("uid") and preconditions.get("resourceVersion"):
            found.add((preconditions["uid"], preconditions["resourceVersion"]))
    return found


def finish_to_gone(timeline: Timeline) -> list[float]:
    """Per finished job under cleanPodPolicy None, not deleted by its user before: seconds from
    its finish (the condition's time, whole seconds) to the last of its active pods gone."""
    found = []
    for job in timeline.jobs.values():
        if job.policy != "None" or job.finished_at is None:
            continue
        if job.deleted_at is not None and job.deleted_at < job.finished_at + 30:
            continue
        gone = [
            life.gone_at
            for life in timeline.pods.values()
            if life.first_owner == job.uid
            and life.gone_at is not None
            and last_phase(life) in ACTIVE
            and (job.deleted_at is None or life.gone_at < job.deleted_at)
        ]
        if gone:
            found.append(max(gone) - job.finished_at)
    return found


def last_phase(life) -> str:
    return list(life.versions.values())[-1][0] if life.versions else ""


def summary(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"n {len(values)}, p50 {statistics.median(values):.2f}, p99 {p99:.2f}, max {ordered[-1]:.2f}"


def rss_drift(churn) -> dict[str, str]:
    """instance -> "first..last MiB" of its current generation (a killed one starts again)."""
    found = {}
    for index in range(len(churn.generation)):
        samples = [s for s in churn.rss if s[1] == index and s[2] == churn.generation[index]]
        if samples:
            found[str(index)] = f"{samples[0][3] / 2**20:.0f}..{samples[-1][3] / 2**20:.0f}"
    return found
