"""What namespace policy and CloudEvents out cost per decision, measured in process.

`python -m tests.support.tools.decision_cost` prints, each the median of several rounds:

* policy resolution: `policy.resolve` + `policy.effective` for a namespace without and with
  annotations (what a cache miss costs besides its GET), and a cached `for_namespace` (what
  every pass and every swept pod pays);
* stamping a decision with its policy (`passes.stamped`);
* the emitter on the hot path: building the CloudEvents of a pass (`notify.notices`) and
  queuing them (`Notifier.submit`), per decision; and, off the hot path, the sender's own
  encoding of one event (the SDK's `to_binary`);
* a whole pass through `Pipeline.handle` (a finished job, 64 Running workers deleted against
  the simulated cluster), without and with a namespace policy and a notifier (its sender held
  back: the pass's own share), per decision; and the sender's encode and POST of one event to a
  loopback sink (wall time, in the sender thread).

Not a test: figures for docs and reviews, from one machine at one moment.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.intake import parse_event
from podsweeper.model import Namespace
from podsweeper.namespaces import NamespacePolicies
from podsweeper.notify import Notifier, notices
from podsweeper.passes import stamped
from podsweeper.pipeline import Pipeline
from podsweeper.policy import effective, resolve
from tests.fixtures.builders import at, event, job, pod, split
from tests.fixtures.parse import parse_job, parse_pod
from tests.support.sink import CloudEventSink

ROUNDS = 7
WORKERS = 64
ANNOTATIONS = {
    "podsweeper.dev/mode": "live",
    "podsweeper.dev/crashloop-action": "warn",
    "podsweeper.dev/orphan-grace-seconds": "60",
    "podsweeper.dev/operator-grace-seconds": "45",
}


def per_call(work: Callable[[], object], calls: int) -> float:
    """Median microseconds per call over ROUNDS rounds of `calls` calls."""
    rounds = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(calls):
            work()
        rounds.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(rounds)


def world(annotations: dict[str, str]) -> tuple[SimulatedCluster, dict]:
    j = job(
        conditions=[("Created", at(0)), ("Running", at(2)), ("Succeeded", at(30))],
        replicas={"Worker": WORKERS},
    )
    cluster = SimulatedCluster(namespaces={"default": Namespace("default", "u", annotations)})
    cluster.observe("add", parse_job(j))
    for i in range(WORKERS):
        cluster.observe("add", parse_pod(pod(j, "Worker", i, phase="Running")))
    return cluster, j


def pass_cost(settings: Settings, annotations: dict[str, str], notifier: Notifier | None) -> float:
    """Median microseconds per decision of a whole pass (the cluster built anew each round)."""
    rounds = []
    for _ in range(ROUNDS):
        cluster, j = world(annotations)
        pipeline = Pipeline(cluster, settings, concurrent_deletes=False, notifier=notifier)
        intake = parse_event(*split(event("update", j, at(40))))
        started = time.perf_counter()
        outcome = pipeline.handle(intake, at(600))
        rounds.append((time.perf_counter() - started) / len(outcome.applied) * 1e6)
        assert len(outcome.applied) == WORKERS
    return statistics.median(rounds)


def post_cost(sink: CloudEventSink, one: object) -> float:
    """Median microseconds for the sender to encode and POST one event to a loopback sink."""
    notifier = Notifier(sink.url, Settings())
    cost = per_call(lambda: notifier._send(one), 50)  # type: ignore[arg-type]
    notifier.close(5)
    return cost


def main() -> None:
    settings = Settings(namespace_live_allowed=True, dry_run=True)
    now = datetime.now(UTC)
    rows = [
        (
            "resolve + effective, no annotations",
            per_call(lambda: effective(settings, resolve(settings, "a", {})), 20_000),
        ),
        (
            "resolve + effective, four annotations",
            per_call(lambda: effective(settings, resolve(settings, "a", ANNOTATIONS)), 5_000),
        ),
    ]
    cluster = SimulatedCluster(namespaces={"a": Namespace("a", "u", ANNOTATIONS)})
    policies = NamespacePolicies(settings)
    policies.for_namespace(cluster, "a", now)
    rows.append(
        ("for_namespace, cached", per_call(lambda: policies.for_namespace(cluster, "a", now), 50_000))
    )
    cluster, j = world(ANNOTATIONS)
    outcome = Pipeline(cluster, settings, concurrent_deletes=False).handle(
        parse_event(*split(event("update", j, at(40)))), at(600)
    )
    decisions = [item.decision for item in outcome.applied]
    policy = decisions[0].policy
    assert policy is not None
    rows.append(("stamp a decision", per_call(lambda: stamped(decisions, policy), 500) / len(decisions)))
    built = per_call(lambda: notices(outcome.applied, lambda d: False, "e", now, "s"), 200) / len(decisions)
    rows.append(("emitter: build a pass's CloudEvents, per decision", built))
    with CloudEventSink() as sink:
        notifier = Notifier(sink.url, Settings(notify_queue=100_000))
        batch = notices(outcome.applied, lambda d: False, "e", now, "s")
        rows.append(
            (
                "emitter: queue one CloudEvent (put_nowait)",
                per_call(lambda: notifier.submit(batch), 200) / len(batch),
            )
        )
        notifier.close(30)
        one = batch[0]
        rows.append(
            (
                "sender (off the hot path): encode one event of 64 pods",
                per_call(lambda: to_binary(CloudEvent(dict(one.attributes), one.data)), 500),
            )
        )
        plain = pass_cost(Settings(dry_run=False), {}, None)
        with_policy = pass_cost(settings, ANNOTATIONS, None)
        # The pass's own share: the sender held back, so its encoding and POSTs (and the
        # in-process sink's work) do not compete with the pass for the interpreter.
        held = Notifier(sink.url, Settings(notify_queue=100_000))
        gate = threading.Event()
        held._send = lambda notice: gate.wait()  # type: ignore[method-assign]
        with_both = pass_cost(settings, ANNOTATIONS, held)
        gate.set()
        rows.append(("sender (off the hot path): encode and POST one event, wall time", post_cost(sink, one)))
    rows += [
        (f"a pass, {WORKERS} deletes: no policy, no notifier, per decision", plain),
        (f"a pass, {WORKERS} deletes: a namespace policy, per decision", with_policy),
        (f"a pass, {WORKERS} deletes: a namespace policy and a notifier, per decision", with_both),
    ]
    width = max(len(name) for name, _ in rows)
    for name, micros in rows:
        print(f"{name:<{width}}  {micros:9.2f} us")


if __name__ == "__main__":
    main()
