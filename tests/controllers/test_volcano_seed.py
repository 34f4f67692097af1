"""podsweeper on the Volcano profile: the seed's gang-scheduled job, as in the seed's cluster, and a
Failed TrainJob whose PodGroup Volcano's queue goes on reserving.

One control plane auditing the function's requests (tests/support/audit.py), World(volcano=True,
trainer=True) on it (the training operator v1.9.4 with `--gang-scheduler-name=volcano`,
vc-scheduler, vc-controller-manager, Trainer v2.3.0 with JobSet, kwok: 3 nodes x 8 GPUs,
tests/support/world/volcano_world.py), and the stack (tests/support/stack): the served function acting in one
namespace, Knative's real receive adapter watching it. Function settings: the defaults but
PODSWEEPER_OPERATOR_GRACE_SECONDS=5 (default 30), so the TrainJob test waits 5 s, not 30, after
the failure; the seed test does not depend on it (under the seed's cleanPodPolicy, None, there
is no operator grace to wait for).

What Volcano really does (tests/controllers/test_volcano_world.py pins it without podsweeper): at
Succeeded the operator deletes the job's PodGroup, the queue stops counting the crash-looping
workers, yet they still hold their GPUs, so a gang job needing them stays unbound. Here
podsweeper removes the workers and such a job runs.

Trainer v2 on Volcano (tests/controllers/test_trainer_volcano_facts.py pins it without podsweeper,
kubeflow/trainer#4033): a Failed TrainJob's PodGroup goes back to Inqueue and stays, its queue
reserving its minResources; a Complete one's goes Completed. Here rule failed-trainjob-podgroup
warns on the Failed one from the sweep once the operator grace has passed, and nothing is deleted
or patched; the Complete one gets no warning. Run with -s to see the timings.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.controllers.test_scenarios import ping_event
from tests.controllers.test_trainer_volcano_facts import GPU, GPUS, NODES, gang_job, phase
from tests.support import audit
from tests.support.access import function_may
from tests.support.harness.waiting import wait_for
from tests.support.world import trainer_world
from tests.support.world.trainjobs import TRAINER, Cluster, controller_of
from tests.support.world.volcano_world import DEFAULT_QUEUE, SCHEDULER_NAME, Volcano, gpu_job

SEED = Path(__file__).resolve().parents[2] / "examples" / "pytorchjob-seed.yaml"
NS = "volcano-seed"
NEXT_WORKERS = 21  # + 1 master = 22 GPUs: fits only once the seed's 3 workers are gone
OPERATOR_GRACE = 5  # PODSWEEPER_OPERATOR_GRACE_SECONDS of this module's function (default 30)


def say(text: str) -> None:
    print(f"\nvolcano-seed: {text}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def stack(receive_adapter):
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.stack import Stack
    from tests.support.world.launcher import World

    started = time.monotonic()
    with (
        ControlPlane(audit=True, log=sys.stderr) as cp,
        World(cp, volcano=True, trainer=True, log=sys.stderr) as world,
    ):
        env = {"PODSWEEPER_OPERATOR_GRACE_SECONDS": str(OPERATOR_GRACE)}
        with Stack(cp, NS, world=world, function_env=env) as s:
            timings = {k: round(v, 1) for k, v in world.timings.items()}
            say(f"stack ready in {time.monotonic() - started:.1f}s (world {timings})")
            api = cp.api_client("admin")
            try:
                yield s, api
            finally:
                api.close()
                say(f"function log: {s.function.log_path}; world logs: {world.workdir}")


def pods(core: client.CoreV1Api, job: str) -> dict[str, client.V1Pod]:
    items = core.list_namespaced_pod(NS, label_selector=f"training.kubeflow.org/job-name={job}").items
    return {p.metadata.name: p for p in items}


def succeeded(custom: client.CustomObjectsApi, name: str) -> bool:
    job = custom.get_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", name)
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)


def test_podsweeper_removes_the_crash_looping_workers_volcano_then_runs_the_next_gang(stack, record_property):
    s, api = stack
    core, custom, vc = client.CoreV1Api(api), client.CustomObjectsApi(api), Volcano(api)
    (seed,) = [d for d in yaml.safe_load_all(SEED.read_text()) if d]
    t0 = time.monotonic()
    custom.create_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", seed)
    wait_for(
        "the seed's PodGroup Running",
        lambda: (vc.podgroup(NS, "pytest") or {}).get("status", {}).get("phase") == "Running",
        60,
    )
    wait_for(
        "4 seed pods bound by Volcano",
        lambda: sum(bool(p.spec.node_name) for p in pods(core, "pytest").values()) == 4,
        60,
    )
    workers = {p.metadata.uid: n for n, p in pods(core, "pytest").items() if "-worker-" in n}
    assert len(workers) == 3 and {p.spec.scheduler_name for p in pods(core, "pytest").values()} == {
        SCHEDULER_NAME
    }

    wait_for("the seed job Succeeded", lambda: succeeded(custom, "pytest"), 60)
    seen_succeeded = time.monotonic()
    # The next gang job asks for 22 of the 24 GPUs: it can run only once the workers are gone.
    custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", NS, "pytorchjobs", gpu_job("next", NEXT_WORKERS)
    )
    wait_for(
        "the seed's workers gone", lambda: not any("-worker-" in n for n in pods(core, "pytest")), 30, 0.05
    )
    gone = time.monotonic() - seen_succeeded
    wait_for(
        "next: 22 pods bound by Volcano and Running",
        lambda: (
            sum(p.status.phase == "Running" and bool(p.spec.node_name) for p in pods(core, "next").values())
            == NEXT_WORKERS + 1
        ),
        60,
    )
    runs = time.monotonic() - seen_succeeded
    record_property("volcano_seed_workers_gone_after_seen_s", round(gone, 2))
    record_property("volcano_next_running_after_seen_s", round(runs, 1))
    say(f"workers gone {gone:.2f} s after Succeeded was seen; next gang job Running after {runs:.1f} s")

    # podsweeper deleted the three workers, nothing else; the master stays.
    decisions = [d for d in s.function.decisions() if d.get("namespace") == NS]
    deleted = {d["uid"]: d for d in decisions if d.get("result") == "deleted"}
    assert set(deleted) == set(workers), deleted
    assert {(d["kind"], d["rule"]) for d in deleted.values()} == {("Pod", "finished-job-active-pod")}
    assert set(pods(core, "pytest")) == {"pytest-master-0"}

    # PodGroups: the seed's was deleted by the operator at Succeeded, never by podsweeper, which
    # has no right to touch one; the running job's PodGroup is there.
    assert vc.podgroup(NS, "pytest") is None
    selector = "involvedObject.kind=PyTorchJob,involvedObject.name=pytest,reason=SuccessfulDeletePodGroup"
    by = {e.source.component for e in core.list_namespaced_event(NS, field_selector=selector).items}
    assert by == {"pytorchjob-controller"}
    assert not any(d.get("kind") == "PodGroup" for d in decisions)
    assert not function_may(api, "delete", "scheduling.volcano.sh", "podgroups", NS) and not function_may(
        api, "deletecollection", "scheduling.volcano.sh", "podgroups", NS
    )
    assert vc.podgroup(NS, "next")["status"]["phase"] == "Running"
    # The queue counts the running job's 22 GPUs; the seed's workers were not counted since
    # their PodGroup went, and are not there any more.
    wait_for("queue allocation 22 GPUs", lambda: vc.allocated_gpus() == NEXT_WORKERS + 1, 30)
    status = vc.queue()["status"]
    assert (status["state"], status.get("running")) == ("Open", 1), status  # one PodGroup Running: next
    say(f"scenario {time.monotonic() - t0:.1f} s")


# -- Trainer v2 on Volcano: a Failed TrainJob's PodGroup left Inqueue (kubeflow/trainer#4033) --

RULE = "failed-trainjob-podgroup"
WARNING = "FailedTrainJobPodGroupReserving"
RUNTIME = "torch-volcano"
# Bounds on what took 0.3-15 s in the runs (tests/support/world/README.md, "Trainer with Volcano";
# crash loop to Failed ~10 s, here 10.3-11.0 s from create, a TrainJob Running 1.3-2.9 s, the
# PodGroup Inqueue 0.3-0.4 s after Failed, Completed when Complete is seen): 4-10x for a busy
# 2-core machine.
FAILED_WITHIN = 120
COMPLETE_WITHIN = 60
SETTLE = 30
# The seed test's 23 pods deleted by the garbage collector and kwok, Volcano's queue then
# allocating nothing (its status is written at the end of each 1 s scheduling cycle): 2.1-3.0 s
# in the runs, 20x.
FREED_WITHIN = 60
# After the sweep's answer: its Event is written before the answer, the wait is only for a
# slow API server.
EVENT_WITHIN = 10
# Past lastTransitionTime + the grace before the sweep is sent: lastTransitionTime is in whole
# seconds, the very value the function reads, and both clocks are this machine's; the margin
# only covers the POST's way to the function.
GRACE_MARGIN = 0.5


def volcano_cluster_runtime(custom: client.CustomObjectsApi, name: str = RUNTIME) -> dict:
    """The ClusterTrainingRuntime on Volcano (trainer_world.volcano_runtime), queue default."""
    rt = trainer_world.volcano_runtime(name, "ClusterTrainingRuntime", DEFAULT_QUEUE)
    try:
        custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", rt)
    except ApiException as error:
        if error.status != 409:
            raise
    return {"name": name, "kind": "ClusterTrainingRuntime"}


def free_the_gpus(custom: client.CustomObjectsApi, core: client.CoreV1Api, vc: Volcano) -> None:
    """Delete what the seed test left (its master and the 22-GPU job `next`) and wait for
    Volcano to allocate nothing: the TrainJobs need 16 of the 24 GPUs."""
    for job in custom.list_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs")["items"]:
        custom.delete_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            NS,
            "pytorchjobs",
            job["metadata"]["name"],
            body={"propagationPolicy": "Background"},
        )
    wait_for(
        "no pod, no PodGroup in the namespace, the queue allocating no GPU",
        lambda: (
            not core.list_namespaced_pod(NS).items
            and not vc.custom.list_namespaced_custom_object(
                "scheduling.volcano.sh", "v1beta1", NS, "podgroups"
            )["items"]
            and vc.allocated_gpus() == 0
        ),
        FREED_WITHIN,
        0.2,
    )


def finished_at(obj: dict, type_: str) -> float:
    """The condition's lastTransitionTime (what the function reads as the finish), as time.time()."""
    (c,) = [c for c in obj["status"]["conditions"] if c["type"] == type_ and c["status"] == "True"]
    return datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")).timestamp()


def sweep(s) -> str:
    """One backstop sweep, POSTed as Knative's PingSource sends its tick (test_scenarios.ping_event),
    at this exact moment; its event id once the function has answered (the sweep is done)."""
    event = ping_event()
    response = s.function.post(event)
    assert response.status_code == 200, response.text
    return event["id"]


def warnings_on(core: client.CoreV1Api, name: str) -> list:
    selector = f"involvedObject.kind=TrainJob,involvedObject.name={name},reason={WARNING}"
    return core.list_namespaced_event(NS, field_selector=selector).items


def test_failed_trainjob_podgroup_inqueue_warned_by_the_sweep_nothing_deleted(stack, record_property):
    """A Failed TrainJob (2 x 4 GPUs requested, its pods crashing to the Job's backoffLimit) on a
    Volcano ClusterTrainingRuntime, its PodGroup Inqueue (the queue reserving 8 GPUs); beside it a
    Complete one on the same runtime, its PodGroup Completed. A sweep inside the operator grace
    warns about neither; the sweep after it writes one Warning FailedTrainJobPodGroupReserving on
    the Failed TrainJob, naming the PodGroup, the queue and the 8 GPUs, and changes nothing: the
    PodGroup is the same one, the TrainJob neither deleted nor suspended, and the API server's
    audit log has no write of the function's on a PodGroup or a TrainJob."""
    s, api = stack
    core, custom, vc, k = client.CoreV1Api(api), client.CustomObjectsApi(api), Volcano(api), Cluster(api, NS)
    t0 = time.monotonic()
    free_the_gpus(custom, core, vc)
    freed = time.monotonic() - t0
    rt = volcano_cluster_runtime(custom)
    # Each pod exits 1 after 1 s and is restarted (OnFailure) until the Job's backoffLimit: Failed.
    failed = k.create_trainjob(gang_job("reserving", rt, run_for="1s", exit_code="1"))
    done = k.create_trainjob(gang_job("finished", rt, run_for="3s"))
    created = time.monotonic()
    wait_for("reserving Failed", lambda: k.condition(k.trainjob("reserving"), "Failed"), FAILED_WITHIN, 0.2)
    failed_after = time.monotonic() - created
    pg = wait_for(
        "PodGroup reserving Inqueue",
        lambda: phase(p := vc.podgroup(NS, "reserving")) == "Inqueue" and p,
        SETTLE,
        0.05,
    )
    wait_for("finished Complete", lambda: k.condition(k.trainjob("finished"), "Complete"), COMPLETE_WITHIN)
    done_pg = wait_for(
        "PodGroup finished Completed",
        lambda: phase(p := vc.podgroup(NS, "finished")) == "Completed" and p,
        SETTLE,
    )
    assert controller_of(pg)["uid"] == failed["metadata"]["uid"]
    assert controller_of(done_pg)["uid"] == done["metadata"]["uid"]
    assert pg["spec"]["minResources"] == {GPU: str(NODES * GPUS)} and pg["spec"]["queue"] == DEFAULT_QUEUE
    failed_at = finished_at(k.trainjob("reserving"), "Failed")
    complete_at = finished_at(k.trainjob("finished"), "Complete")

    # A sweep inside the grace: no warning. Judged only if the sweep answered before the grace
    # ended (every `now` of its pass was then inside it); on a machine too slow for that, said.
    early = sweep(s)
    early_inside = time.time() < failed_at + OPERATOR_GRACE
    if early_inside:
        assert not [d for d in s.function.decisions() if d.get("event_id") == early and d.get("rule") == RULE]
        assert not warnings_on(core, "reserving"), "warned inside the operator grace"
    else:
        say("the early sweep answered after the grace had ended: not judged")

    # The sweep once both have been finished for the grace.
    due = max(failed_at, complete_at) + OPERATOR_GRACE + GRACE_MARGIN
    time.sleep(max(0.0, due - time.time()))
    swept_at = time.time()
    late = sweep(s)
    events = wait_for("the Warning on reserving", lambda: warnings_on(core, "reserving"), EVENT_WITHIN)
    decided_after = time.time() - failed_at

    (event,) = events
    assert event.type == "Warning"
    assert (event.involved_object.kind, event.involved_object.uid) == ("TrainJob", failed["metadata"]["uid"])
    assert "PodGroup reserving is Inqueue" in event.message, event.message
    assert f"Volcano queue {DEFAULT_QUEUE} reserves {GPU} {NODES * GPUS}" in event.message, event.message
    decisions = [d for d in s.function.decisions() if d.get("rule") == RULE]
    assert {d["uid"] for d in decisions} == {failed["metadata"]["uid"]}, decisions  # never the Complete one
    assert all(
        d["action"] == "warn" and (d["kind"], d["name"]) == ("TrainJob", "reserving") for d in decisions
    )
    by_sweep = [d for d in decisions if d["event_id"] == late]
    assert [d["result"] for d in by_sweep] in (["warned"], ["already-warned"]), decisions
    assert "warned" in {d["result"] for d in decisions}
    # The control: the Complete TrainJob on the same runtime, its PodGroup Completed, not warned.
    assert not warnings_on(core, "finished")
    assert phase(vc.podgroup(NS, "finished")) == "Completed"

    # Nothing changed: the same PodGroup, still Inqueue; the TrainJob there, Failed, not suspended.
    after = vc.podgroup(NS, "reserving")
    assert after is not None and after["metadata"]["uid"] == pg["metadata"]["uid"], (
        "the PodGroup was replaced"
    )
    assert phase(after) == "Inqueue"
    tj = k.trainjob("reserving")
    assert tj is not None and tj["metadata"]["uid"] == failed["metadata"]["uid"]
    assert not tj["metadata"].get("deletionTimestamp") and not tj["spec"].get("suspend")
    assert k.condition(tj, "Failed")
    # The server's word: the function wrote nothing to a PodGroup or a TrainJob (no DELETE, no
    # PATCH, nothing) in this module's run, and its sweep did list the PodGroups.
    calls = audit.requests(s.cp.audit_log)
    touched = [
        c for c in calls if c.verb in audit.WRITES and c.resource.split("/")[0] in ("podgroups", "trainjobs")
    ]
    assert not touched, touched
    listed = [
        c
        for c in calls
        if (c.verb, c.resource) == ("list", "podgroups")
        and datetime.fromisoformat(c.at.replace("Z", "+00:00")).timestamp() >= swept_at
    ]
    assert listed, "the sweep did not list the PodGroups"
    others = sorted({(c.verb, c.resource) for c in calls if c.verb in audit.WRITES and c.namespace == NS})
    say(
        f"freed the seed's GPUs in {freed:.1f} s; reserving Failed {failed_after:.1f} s after create; "
        f"early sweep {'inside' if early_inside else 'NOT inside'} the grace; warned by the sweep "
        f"{decided_after:.1f} s after Failed (grace {OPERATOR_GRACE} s); results "
        f"{[(d['event_id'] == late and 'sweep' or d['event_id'], d['result']) for d in decisions]}; "
        f"the function's writes in {NS}: {others}; message: {event.message!r}"
    )
    record_property("failed_trainjob_warned_after_failed_s", round(decided_after, 1))

    # Leave the GPUs free for whatever runs next on this world.
    for name in ("reserving", "finished"):
        k.delete(TRAINER, "trainjobs", name, "Background")
    wait_for(
        "the TrainJobs' PodGroups gone (garbage collector)",
        lambda: (
            not vc.custom.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", NS, "podgroups")[
                "items"
            ]
        ),
        SETTLE,
    )
    say(f"TrainJob scenario {time.monotonic() - t0:.1f} s")
