"""podsweeper on the Volcano profile: the seed's gang-scheduled job, as in the seed's cluster.

One control plane, World(volcano=True) on it (the training operator v1.9.4 with
`--gang-scheduler-name=volcano`, vc-scheduler, vc-controller-manager, kwok: 3 nodes x 8 GPUs,
tests/support/world/volcano_world.py), and the stack (tests/support/stack): the served function acting in one
namespace, Knative's real receive adapter watching it. Default function settings: under the
seed's cleanPodPolicy (None) there is no operator grace to wait for.

What Volcano really does (tests/controllers/test_volcano_world.py pins it without podsweeper): at
Succeeded the operator deletes the job's PodGroup, the queue stops counting the crash-looping
workers, yet they still hold their GPUs, so a gang job needing them stays unbound. Here
podsweeper removes the workers and such a job runs. Run with -s to see the timings.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.support.harness.waiting import wait_for
from tests.support.world.volcano_world import SCHEDULER_NAME, Volcano, gpu_job

SEED = Path(__file__).resolve().parents[2] / "examples" / "pytorchjob-seed.yaml"
NS = "volcano-seed"
NEXT_WORKERS = 21  # + 1 master = 22 GPUs: fits only once the seed's 3 workers are gone
FUNCTION_USER = "system:serviceaccount:podsweeper:podsweeper"


def say(text: str) -> None:
    print(f"\nvolcano-seed: {text}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def stack(receive_adapter):
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.stack import Stack
    from tests.support.world.launcher import World

    started = time.monotonic()
    with ControlPlane(log=sys.stderr) as cp, World(cp, volcano=True, log=sys.stderr) as world:
        with Stack(cp, NS, world=world) as s:
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


def may(api, verb: str, resource: str) -> bool:
    """What the API server's authorizer answers for the function's ServiceAccount."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": FUNCTION_USER,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:podsweeper", "system:authenticated"],
            "resourceAttributes": {
                "namespace": NS,
                "verb": verb,
                "group": "scheduling.volcano.sh",
                "resource": resource,
            },
        },
    }
    answer = client.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(answer.status.allowed)


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
    assert not may(api, "delete", "podgroups") and not may(api, "deletecollection", "podgroups")
    assert vc.podgroup(NS, "next")["status"]["phase"] == "Running"
    # The queue counts the running job's 22 GPUs; the seed's workers were not counted since
    # their PodGroup went, and are not there any more.
    wait_for("queue allocation 22 GPUs", lambda: vc.allocated_gpus() == NEXT_WORKERS + 1, 30)
    status = vc.queue()["status"]
    assert (status["state"], status.get("running")) == ("Open", 1), status  # one PodGroup Running: next
    say(f"scenario {time.monotonic() - t0:.1f} s")
