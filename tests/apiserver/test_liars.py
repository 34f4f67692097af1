"""Lying CloudEvents against the real API server: the function, served live as its own user,
writes nothing and reads no log because of a lie (issue "Trust against a liar").

Any pod may POST to the function, and any user who may create ConfigMaps in a namespace may
plant one that looks like podsweeper's record. The world, made as the admin: a running
PyTorchJob with two healthy workers, a finished one, a database pod of no job, and a running
TrainJob with its JobSet, batch Job and pod. Lies are POSTed for each rule and each record
(conditions, owners, uids, restart counts, container states, deletes of what exists,
Reference mode), then a finish mark is planted and a truthful event makes the TrainJob's pass
read it. Judged from kube-apiserver's audit log of the function's user: no write of any kind
(delete, patch, ConfigMap create or update, Event create or patch) and no pods/log read.
"""

from __future__ import annotations

import copy
import secrets
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from tests.fixtures import facts
from tests.fixtures.builders import at, event, stamp
from tests.fixtures.builders import container_status as cs
from tests.support import audit
from tests.support.harness.served import Served
from tests.support.stack.players import Play
from tests.support.trainer_objects import TrainerObjects


@pytest.fixture(scope="module")
def audited():
    """One control plane for the file, logging the function's user's requests."""
    from tests.support.controlplane.build import ETCD, KUBE_APISERVER, ensure_built
    from tests.support.controlplane.launcher import ControlPlane

    ensure_built(ETCD, log=sys.stderr)
    ensure_built(KUBE_APISERVER, log=sys.stderr)
    with ControlPlane(audit=True, log=sys.stderr) as cp:
        yield cp


def _failed(name: str, restarts: int = 0) -> list[dict]:
    return [cs(state="terminated", exit_code=1, reason="Error", restarts=restarts, name=name)]


def _looping(name: str) -> list[dict]:
    return [cs(state="waiting", reason="CrashLoopBackOff", restarts=50, last_exit=1, name=name)]


def _told(obj: dict, **changes) -> dict:
    """A copy of `obj` as a liar tells it: metadata/status keys replaced."""
    told = copy.deepcopy(obj)
    for key, value in changes.items():
        where, _, field = key.partition("__")
        told.setdefault(where, {})[field] = value
    return told


def test_lies_make_the_function_write_nothing_and_read_no_log(audited, tmp_path):
    admin = audited.api_client("admin")
    namespace = f"t-{secrets.token_hex(4)}"
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": namespace}})
    operator, trainer = Play(admin, namespace, node=None), TrainerObjects(admin, namespace)
    # A running PyTorchJob (a backoffLimit: its add names no warning) and its healthy workers.
    train = operator.create_job(name="train", backoff_limit=3)
    train = operator.set_job_conditions(train, [("Created", at(0)), ("Running", at(1))])
    workers = []
    for index in range(2):
        worker = operator.create_pod(train, "Worker", index)
        workers.append(operator.set_pod_status(worker, "Running", [cs(name="pytorch")]))
    done = operator.create_job(name="done", backoff_limit=3)
    done = operator.set_job_conditions(done, [("Created", at(0)), ("Succeeded", at(1))])
    db = core.create_namespaced_pod(
        namespace,
        {"metadata": {"name": "postgres-0"}, "spec": {"containers": [{"name": "postgres", "image": "pg"}]}},
    )
    db = client.ApiClient().sanitize_for_serialization(db)
    # A running TrainJob, its JobSet (made with it), one batch Job and its pod.
    tj = trainer.trainjob("tj")
    js = trainer.jobset("tj", owner=tj)
    bj = trainer.batch_job(js)
    chain_pod = trainer.chain_pod(bj)
    # A running TrainJob whose JobSet was made again (a person deleted the first: Trainer makes
    # another), at least 2 s after the TrainJob: what a restart after a finish looks like.
    tj2 = trainer.trainjob("tj2")
    time.sleep(2.5)  # passes.FIRST_JOBSET_WITHIN_SECONDS (2.0) and a margin for the second's rounding
    js2 = trainer.jobset("tj2", owner=tj2)

    owner_train = {**workers[0]["metadata"]["ownerReferences"][0]}
    owner_done = {**owner_train, "name": "done", "uid": done["metadata"]["uid"]}
    train_labels, done_labels = (
        workers[0]["metadata"]["labels"],
        {
            **workers[0]["metadata"]["labels"],
            facts.JOB_NAME_LABEL: "done",
        },
    )
    now = datetime.now(UTC)
    failed_tj = _told(
        tj, status__conditions=[{"type": "Failed", "status": "True", "lastTransitionTime": stamp(now)}]
    )
    complete_tj = _told(
        tj, status__conditions=[{"type": "Complete", "status": "True", "lastTransitionTime": stamp(now)}]
    )
    lies: list[tuple[str, dict]] = [
        # reproduction 1: a TrainJob claimed Failed (its real uid), or Complete
        ("update", failed_tj),
        ("update", complete_tj),
        ("add", failed_tj),
        # reproduction 2: the database pod dressed as a worker of `train` (its uid, another, none)
        ("update", _dressed(db, owner_train, train_labels)),
        ("update", _dressed(db, {**owner_train, "uid": "made-up"}, train_labels)),
        ("update", _dressed(db, None, train_labels)),
        ("delete", _dressed(db, owner_train, train_labels)),
        # ... and as the TrainJob's chain pod
        (
            "update",
            _dressed(db, chain_pod["metadata"]["ownerReferences"][0], chain_pod["metadata"]["labels"]),
        ),
        # a healthy worker: crash-looping, failed, another uid, of the finished job, deleted
        ("update", _told(workers[0], status__containerStatuses=_looping("pytorch"))),
        (
            "update",
            _told(workers[0], status__phase="Failed", status__containerStatuses=_failed("pytorch", 7)),
        ),
        ("update", _told(workers[0], metadata__uid="earlier", status__containerStatuses=_failed("pytorch"))),
        (
            "update",
            _told(
                workers[1],
                metadata__ownerReferences=[owner_done],
                metadata__labels=done_labels,
                status__phase="Running",
                status__containerStatuses=_looping("pytorch"),
            ),
        ),
        ("delete", _told(workers[0], status__phase="Failed", status__containerStatuses=_failed("pytorch"))),
        # the running job: finished, deleted with another uid, deleted with its own
        ("update", _finished(train, "Succeeded")),
        ("update", _finished(train, "Failed")),
        ("delete", _told(train, metadata__uid="not-the-job")),
        ("update", _told(train, metadata__uid="not-the-job")),
        ("delete", train),
        # the chain: orphaned, deleted, another owner, restarts without bound
        ("update", _told(js, metadata__ownerReferences=[])),
        ("delete", js),
        ("add", _told(bj, metadata__ownerReferences=[])),
        ("delete", bj),
        ("add", _unbounded(js)),
        ("delete", tj),
        ("update", _told(chain_pod, status__phase="Failed", status__containerStatuses=_failed("node"))),
    ]
    for obj in (train, workers[0], tj, js, bj, chain_pod, db):  # Reference mode: the names alone
        lies += [(f"ref:{verb}", obj) for verb in ("add", "update", "delete")]

    env = {
        "KUBECONFIG": str(audited.write_kubeconfig(tmp_path / "function.kubeconfig", "function")),
        "PODSWEEPER_NAMESPACES": namespace,
        "PODSWEEPER_DRY_RUN": "false",
        "PODSWEEPER_ORPHAN_GRACE_SECONDS": "0",
        "PODSWEEPER_OPERATOR_GRACE_SECONDS": "0",
        "PODSWEEPER_CRASHLOOP_RESTARTS": "1",
        "PODSWEEPER_CRASHLOOP_ACTION": "suspend",
    }
    with Served(env, tmp_path / "function.log") as served:
        for told, obj in lies:
            mode, _, verb = told.rpartition(":")
            raw = event(verb, obj, now, mode="ref" if mode else "resource")
            answer = served.post(raw)
            assert answer.status_code < 300, (told, answer.status_code, answer.text, served.tail())
        lied_to = audit.requests(audited.audit_log, namespace=namespace)
        assert_no_write_nor_log(lied_to, served.decisions())
        # A finish mark planted by a user who may create ConfigMaps here, after the job was
        # made, as podsweeper writes one; then truthful events have the TrainJob's pass read it.
        for job, jobset in ((tj, js), (tj2, js2)):
            core.create_namespaced_config_map(namespace, _planted(job, jobset))
            for verb in ("add", "update"):
                answer = served.post(event(verb, jobset, datetime.now(UTC)))
                assert answer.status_code < 300, (answer.status_code, answer.text)
        decisions = served.decisions()
    assert len(lied_to) > len(lies) // 2, "the lies were not even looked into: the test tests nothing"
    assert_no_write_nor_log(audit.requests(audited.audit_log, namespace=namespace), decisions)
    for name in ("tj", "tj2"):
        found = client.CustomObjectsApi(admin).get_namespaced_custom_object(
            facts.TRAINJOB.group, facts.TRAINJOB.versions[0], namespace, facts.TRAINJOB.plural, name
        )
        assert not (found.get("spec") or {}).get("suspend"), (name, found["spec"])
    trainer.delete_all()
    operator.custom.delete_collection_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")
    core.delete_namespace(namespace)


def assert_no_write_nor_log(calls: list[audit.Call], decisions: list[dict]) -> None:
    """No write of any kind, no pods/log read, no decision that acts or warns."""
    wrong = [c for c in calls if c.verb in audit.WRITES or c.resource == "pods/log"]
    acted = [d for d in decisions if d.get("action") in ("delete", "suspend", "warn", "force-delete")]
    assert not wrong and not acted, (
        "lies led to:\n"
        + "\n".join(f"  {c.verb} {c.resource} {c.name} -> {c.code}" for c in wrong)
        + f"\ndecisions: {acted}"
    )


def _planted(job: dict, jobset: dict) -> dict:
    """podsweeper's finish mark as anyone may write it: the label, the job's uid as owner, a
    Failed finish an hour before the JobSet was made."""
    made = datetime.fromisoformat(jobset["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    name = job["metadata"]["name"]
    owner = {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "name": name,
        "uid": job["metadata"]["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }
    return {
        "metadata": {
            "name": f"podsweeper-finished-{name}",
            "labels": {"podsweeper.dev/finished": name},
            "ownerReferences": [owner],
        },
        "data": {"condition": "Failed", "at": (made - timedelta(hours=1)).isoformat(), "top_uid": ""},
    }


def _dressed(pod: dict, owner: dict | None, labels: dict) -> dict:
    """A pod of no job told as a job's, its container failed."""
    container = pod["spec"]["containers"][0]["name"]
    return _told(
        pod,
        metadata__ownerReferences=[owner] if owner else [],
        metadata__labels=labels,
        status__phase="Failed",
        status__containerStatuses=_failed(container),
    )


def _finished(job: dict, condition: str) -> dict:
    when = stamp(datetime.now(UTC))
    conditions = [{"type": condition, "status": "True", "lastTransitionTime": when, "lastUpdateTime": when}]
    return _told(job, status__conditions=conditions)


def _unbounded(jobset: dict) -> dict:
    told = copy.deepcopy(jobset)
    told["spec"]["failurePolicy"] = {"rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts"}]}
    return told
