"""podsweeper against the real mpi-operator v0.8.0 (tests/support/world, World(mpi_operator=True)), through
Knative's real receive adapter watching what knative/overlays/mpi-operator makes the shipped source
watch (MPIJob kubeflow.org/v2beta1), and the real PingSource dispatcher's sweep ticks.

One control plane serving the mpi-operator's CRD, one world and one stack for the module; one
namespace per scenario, all of them the function's. Settings: PODSWEEPER_OPERATOR_GRACE_SECONDS=2
(the evicted MPIJob's suspend waits that long, then a sweep tick acts) and
PODSWEEPER_ORPHAN_GRACE_SECONDS=3 (so the look-alike batch Job's pod is old enough to be an orphan,
were it ours). A sweep tick every 2 s all along: the leftovers must stay removed under it.

- #643: cleanPodPolicy All; the operator deletes the workers, not the finished launcher Job's pod:
  podsweeper deletes that pod, on the MPIJob's own event; the launcher Job stays.
- #647 (launcher failed): cleanPodPolicy None; the workers run on after the MPIJob Failed:
  podsweeper deletes them; the operator does not bring them back; the failed launcher pod is kept.
- #647 (worker evicted): Failed without completionTime, the operator still runs the job and would
  re-create what is deleted: podsweeper deletes no pod and suspends the MPIJob; the operator then
  removes the running workers and the launcher pod, for good.
- A batch Job `solo-launcher` whose pod says it is MPIJob solo's launcher, with no MPIJob: untouched.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.fixtures.builders import for_create, secret_env
from tests.fixtures.mpi import mpijob
from tests.support.harness.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"
SCENARIOS = ("m643", "m647", "mevict", "mplain")
ENV = {
    "PODSWEEPER_OPERATOR_GRACE_SECONDS": "2",
    "PODSWEEPER_ORPHAN_GRACE_SECONDS": "3",
    "PODSWEEPER_DRY_RUN": "false",
}


def say(text: str) -> None:
    print(f"\nreal-mpi: {text}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from tests.support.adapter.ping import FAST_SCHEDULE
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.stack import Stack
    from tests.support.tools.kustomize import render
    from tests.support.world.launcher import World

    rendered = render(ROOT / "knative/overlays/mpi-operator")
    manifest = tmp_path_factory.mktemp("mpi-source") / "apiserversource.yaml"
    manifest.write_text(yaml.safe_dump(next(d for d in rendered if d["kind"] == "ApiServerSource")))
    prefix = uuid.uuid4().hex[:4]
    namespaces = [f"{name}-{prefix}" for name in SCENARIOS]
    t0 = time.monotonic()
    # The world (the mpi-operator, which must own :8080) starts before any Knative binary.
    with (
        ControlPlane(mpi_operator=True) as cp,
        World(cp, mpi_operator=True) as world,
        Stack(
            cp,
            namespaces,
            world=world,
            function_env=ENV,
            ping_schedule=FAST_SCHEDULE,
            source_manifest=manifest,
        ) as st,
    ):
        say(f"stack ready in {time.monotonic() - t0:.1f} s (world {world.timings})")
        st.ns = dict(zip(SCENARIOS, namespaces, strict=True))
        yield st


@pytest.fixture(scope="module")
def k(stack):
    from kubernetes import client

    class K:
        core = client.CoreV1Api(stack.admin_api)
        batch = client.BatchV1Api(stack.admin_api)
        custom = client.CustomObjectsApi(stack.admin_api)

        def create(self, ns: str, body: dict) -> dict:
            return self.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, for_create(body, ns)
            )

        def condition(self, ns: str, name: str, kind: str) -> dict | None:
            job = self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            return next(
                (
                    c
                    for c in (job.get("status") or {}).get("conditions") or []
                    if c["type"] == kind and c["status"] == "True"
                ),
                None,
            )

        def pods(self, ns: str, role: str | None = None) -> dict[str, client.V1Pod]:
            selector = "training.kubeflow.org/job-name" + (
                f",training.kubeflow.org/job-role={role}" if role else ""
            )
            return {
                p.metadata.name: p for p in self.core.list_namespaced_pod(ns, label_selector=selector).items
            }

        def live(self, ns: str, role: str) -> list[str]:
            """Phases of the pods not being deleted."""
            return sorted(
                p.status.phase for p in self.pods(ns, role).values() if not p.metadata.deletion_timestamp
            )

    return K()


def decided(stack, ns: str) -> list[dict]:
    return [d for d in stack.function.decisions() if d.get("namespace") == ns]


def stays(what: str, check, seconds: float = 5.0) -> None:
    """check() holds now and for `seconds` (sweep ticks come every 2 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what
        time.sleep(0.5)


def test_643_launcher_pod_left_by_clean_pod_policy_all_is_deleted(stack, k):
    ns = stack.ns["m643"]
    k.create(ns, mpijob("pi", policy="All", launcher_run="2s"))
    wait_for("MPIJob Succeeded", lambda: k.condition(ns, "pi", "Succeeded"), timeout=60)
    t0 = time.monotonic()
    wait_for("launcher pod gone", lambda: not k.pods(ns, "launcher"), timeout=30)
    say(f"#643: launcher pod gone {time.monotonic() - t0:.1f} s after the MPIJob read Succeeded")
    # The operator deletes the workers itself (cleanPodPolicy All); on a busy machine it may do so
    # a moment after podsweeper removed the launcher pod.
    wait_for("the operator deleting the workers itself", lambda: not k.pods(ns, "worker"), timeout=30)
    (launcher,) = [d for d in decided(stack, ns) if d["result"] == "deleted"]
    assert (launcher["rule"], launcher["kind"], launcher["job"]) == (
        "clean-pod-policy-all",
        "Pod",
        "MPIJob/pi",
    )
    assert launcher["name"].startswith("pi-launcher-")
    assert k.batch.read_namespaced_job("pi-launcher", ns).metadata.deletion_timestamp is None, (
        "the Job is kept"
    )
    stays("nothing comes back", lambda: not k.pods(ns))


def test_647_workers_left_running_after_the_launcher_failed_are_deleted(stack, k):
    ns = stack.ns["m647"]
    k.create(ns, mpijob("pi", policy="None", launcher_exit="1", launcher_run="2s"))
    wait_for("MPIJob Failed", lambda: k.condition(ns, "pi", "Failed"), timeout=60)
    t0 = time.monotonic()
    wait_for("workers gone", lambda: not k.pods(ns, "worker"), timeout=30)
    say(f"#647 (launcher failed): workers gone {time.monotonic() - t0:.1f} s after the MPIJob read Failed")
    rules = {(d["rule"], d["result"]) for d in decided(stack, ns) if d["name"].startswith("pi-worker-")}
    assert rules == {("finished-job-active-pod", "deleted")}
    stays(
        "workers stay gone, the failed launcher pod is kept (None keeps logs)",
        lambda: not k.pods(ns, "worker") and k.live(ns, "launcher") == ["Failed"],
    )


def test_647_evicted_mpijob_is_suspended_and_its_pods_stay_gone(stack, k):
    ns = stack.ns["mevict"]
    k.create(ns, mpijob("pi", policy="Running", launcher_run="1h"))
    wait_for(
        "launcher and workers Running",
        lambda: k.live(ns, "worker") == ["Running", "Running"] and k.live(ns, "launcher") == ["Running"],
        timeout=60,
    )
    evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
    k.core.patch_namespaced_pod_status("pi-worker-1", ns, {"status": evicted})
    wait_for("MPIJob Failed (MPIJobEvicted)", lambda: k.condition(ns, "pi", "Failed"), timeout=30)
    t0 = time.monotonic()
    wait_for("MPIJob suspended", lambda: k.condition(ns, "pi", "Suspended"), timeout=30)
    wait_for(
        "running pods gone",
        lambda: k.live(ns, "worker") == ["Failed"] and not k.live(ns, "launcher"),
        timeout=30,
    )
    say(f"#647 (evicted): suspended and running pods gone {time.monotonic() - t0:.1f} s after Failed")
    acted = [(d["rule"], d["action"], d["kind"], d["result"]) for d in decided(stack, ns) if d.get("result")]
    assert ("failed-mpijob-running", "suspend", "MPIJob", "suspended") in acted
    assert not [a for a in acted if a[1] == "delete"], "no pod deleted: the operator would re-create it"
    events = k.core.list_namespaced_event(ns, field_selector="reason=FailedMPIJobSuspended").items
    assert events and "MPIJobEvicted" in events[0].message
    stays("they stay gone", lambda: k.live(ns, "worker") == ["Failed"] and not k.live(ns, "launcher"))


def test_a_batch_jobs_pod_no_mpijob_owns_is_never_touched(stack, k):
    """Labelled exactly like a launcher pod of MPIJob `solo`, controlled by the batch Job
    `solo-launcher`, but no MPIJob controls that Job (there is none)."""
    ns = stack.ns["mplain"]
    labels = {
        "training.kubeflow.org/job-name": "solo",
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-role": "launcher",
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "solo-launcher"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels, "annotations": {"sim.podsweeper.dev/run-for": "1s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "c", "env": secret_env()}],
                },
            },
        },
    }
    k.batch.create_namespaced_job(ns, job)
    wait_for("its pod Succeeded", lambda: k.live(ns, "launcher") == ["Succeeded"], timeout=60)
    (name,) = k.pods(ns)
    stays("left alone through sweeps, past the orphan grace", lambda: list(k.pods(ns)) == [name], seconds=8)
    assert not decided(stack, ns)
