"""The synthetic churn stream: N training jobs x 8 pods through their whole life.

Objects come from tests/fixtures/builders.py and are completed here with what a real API
server and kubelet add to a running pod (the kubelet's managedFields entry, the projected
service-account volume, default tolerations, pod conditions, IPs), so a running pod body is
about 5 KB, as on a real cluster.

Each job (PyTorchJob / TFJob / MPIJob, 1 leader + 7 workers, spread over 20 namespaces,
started 2 s apart so their lives overlap) yields, in time order:

    job add                      (10% without backoffLimit -> no-backoff-limit warning pass)
    8 pod add (Pending)          8 pod update (ContainerCreating)     8 pod update (Running)
    job update (Running)
    5%: one worker update in CrashLoopBackOff (restartCount 5)       -> crash-loop pass
    leader update (Succeeded); 70% of jobs: 7 worker updates (Succeeded) as well
    job update (Succeeded)                                           -> finished pass
    pod delete for each pod podsweeper deletes there (the watch's DELETED)
    10% of jobs are deleted later: job delete -> orphan pass, then the GC's pod deletes

`expected_deletes` is what the contract says must be deleted: the benchmark checks the
function did exactly that, so a fast but wrong pipeline cannot pass unnoticed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bench.harness import builders as b

PODS_PER_JOB = 8
NAMESPACES = 20
KIND_MIX = (
    ("PyTorchJob", "Master"),
    ("PyTorchJob", "Master"),
    ("PyTorchJob", "Master"),
    ("TFJob", "Chief"),
    ("MPIJob", "Launcher"),
)
POLICIES = ("None", "None", "Running", "All", "None")


@dataclass(frozen=True)
class Event:
    """One CloudEvent as the function receives it in binary mode: attributes + body bytes."""

    time: datetime
    seq: int
    attributes: dict[str, str]
    body: bytes  # the data: the Kubernetes object, JSON
    kind: str  # "pod" / "job"
    verb: str
    obj: dict = field(repr=False, compare=False, hash=False)

    def structured_line(self) -> str:
        """The same event as a replay line (CloudEvents JSON format)."""
        return json.dumps({**self.attributes, "data": self.obj})


@dataclass
class Stream:
    events: list[Event]
    expected_deletes: int
    jobs: int

    @property
    def body_bytes(self) -> int:
        return sum(len(e.body) for e in self.events)

    def pod_body_mean(self) -> float:
        pods = [len(e.body) for e in self.events if e.kind == "pod"]
        return sum(pods) / max(1, len(pods))


# -- what the API server and kubelet add to a pod ----------------------------------------


def _kubelet_fields(at: datetime, ip: str) -> dict:
    cond = {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
    return {
        "manager": "kubelet",
        "operation": "Update",
        "apiVersion": "v1",
        "time": b.stamp(at),
        "fieldsType": "FieldsV1",
        "subresource": "status",
        "fieldsV1": {
            "f:status": {
                "f:conditions": {
                    f'k:{{"type":"{t}"}}': dict(cond)
                    for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")
                },
                "f:containerStatuses": {},
                "f:hostIP": {},
                "f:hostIPs": {},
                "f:phase": {},
                "f:podIP": {},
                "f:podIPs": {".": {}, f'k:{{"ip":"{ip}"}}': {".": {}, "f:ip": {}}},
                "f:startTime": {},
            }
        },
    }


def realistic(pod: dict, at: datetime, index: int, scheduled: bool) -> dict:
    """Complete a builders.pod() with what the API server, scheduler and kubelet write."""
    meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
    volume = f"kube-api-access-{b.uid(meta['name'])[:5]}"
    spec["serviceAccountName"] = spec["serviceAccount"] = "default"
    spec["priority"], spec["preemptionPolicy"] = 0, "PreemptLowerPriority"
    spec["tolerations"] = [
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    spec["volumes"] = [
        {
            "name": volume,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ],
            },
        }
    ]
    for container in spec["containers"]:
        container["volumeMounts"] = [
            {"name": volume, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ]
        container["ports"] = [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}]
    if not scheduled:
        spec.pop("nodeName", None)
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": b.stamp(at),
                "reason": "Unschedulable",
                "message": "0/12 nodes are available: 12 Insufficient nvidia.com/gpu.",
            }
        ]
        return pod
    ip = f"10.244.{index % 250}.{(index // 250) % 250 + 2}"
    ready = "True" if status.get("phase") == "Running" else "False"
    status["conditions"] = [
        {"type": t, "status": s, "lastProbeTime": None, "lastTransitionTime": b.stamp(at)}
        for t, s in (
            ("PodReadyToStartContainers", "True"),
            ("Initialized", "True"),
            ("Ready", ready),
            ("ContainersReady", ready),
            ("PodScheduled", "True"),
        )
    ]
    status["hostIP"], status["hostIPs"] = "10.128.0.17", [{"ip": "10.128.0.17"}]
    status["podIP"], status["podIPs"] = ip, [{"ip": ip}]
    meta["managedFields"].append(_kubelet_fields(at, ip))
    return pod


# -- the stream ----------------------------------------------------------------------------


class _Builder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.seq = 0

    def add(self, verb: str, obj: dict, at: datetime) -> None:
        raw = b.event(verb, obj, at)
        attributes = {k: str(v) for k, v in raw.items() if k != "data"}
        kind = "pod" if obj["kind"] == "Pod" else "job"
        self.seq += 1
        self.events.append(Event(at, self.seq, attributes, json.dumps(obj).encode(), kind, verb, obj))


def job_events(i: int, start: datetime, out: _Builder, prefix: str = "train") -> int:
    """Append job i's life to `out`; returns how many of its pods must be deleted."""
    kind, leader = KIND_MIX[i % len(KIND_MIX)]
    policy = POLICIES[i % len(POLICIES)]
    no_limit = i % 10 == 3
    crash = i % 20 == 7
    stuck = i % 10 in (1, 4, 8)  # workers still running when the leader finishes (seed exp. 2)
    deleted_later = i % 10 == 6
    name, namespace = f"{prefix}-{i:06d}", f"team-{i % NAMESPACES:02d}"
    replicas = {leader: 1, "Worker": PODS_PER_JOB - 1}
    t = lambda s: start + timedelta(seconds=s)  # noqa: E731

    def the_job(*conditions):
        return b.job(
            kind,
            name,
            namespace,
            clean_pod_policy=policy,
            replicas=replicas,
            backoff_limit=None if no_limit else 3,
            created=start,
            conditions=[(c, t(s)) for c, s in conditions],
        )

    def the_pod(rtype, index, n, phase, at, containers=None, scheduled=True):
        obj = b.pod(
            job_obj,
            rtype,
            index,
            phase=phase,
            created=start,
            containers=containers,
            node=f"gpu-node-{(i * 8 + n) % 12:02d}",
        )
        return realistic(obj, at, i * PODS_PER_JOB + n, scheduled)

    job_obj = the_job()
    out.add("add", job_obj, t(0))
    roles = [(leader, 0)] + [("Worker", k) for k in range(PODS_PER_JOB - 1)]
    for n, (rtype, index) in enumerate(roles):
        out.add("add", the_pod(rtype, index, n, "Pending", t(1), scheduled=False), t(1))
    for n, (rtype, index) in enumerate(roles):
        out.add(
            "update",
            the_pod(
                rtype,
                index,
                n,
                "Pending",
                t(2),
                [b.container_status(state="waiting", reason="ContainerCreating", at=t(2))],
            ),
            t(2),
        )
    running: dict[int, dict] = {}
    for n, (rtype, index) in enumerate(roles):
        running[n] = the_pod(rtype, index, n, "Running", t(10), [b.container_status(at=t(10))])
        out.add("update", running[n], t(10))
    out.add("update", the_job(("Created", 0), ("Running", 10)), t(11))
    if crash:
        looping = the_pod(
            "Worker",
            2,
            3,
            "Running",
            t(100),
            [
                b.container_status(
                    state="waiting", reason="CrashLoopBackOff", restarts=5, last_exit=1, at=t(100)
                )
            ],
        )
        running[3] = looping
        out.add("update", looping, t(100))
    final: dict[int, dict] = dict(running)
    done = [b.container_status(state="terminated", exit_code=0, at=t(600))]
    final[0] = the_pod(leader, 0, 0, "Succeeded", t(600), done)
    out.add("update", final[0], t(600))
    if not stuck:
        for n, (rtype, index) in enumerate(roles[1:], start=1):
            final[n] = the_pod(rtype, index, n, "Succeeded", t(600), done)
            out.add("update", final[n], t(600))
    out.add("update", the_job(("Created", 0), ("Running", 10), ("Succeeded", 601)), t(601))
    # What the finished pass must delete: active pods always, terminated ones under All.
    doomed = [
        n for n, p in final.items() if p["status"]["phase"] in ("Pending", "Running") or policy == "All"
    ]
    for n in doomed:
        out.add("delete", final[n], t(602))
    if deleted_later:
        kept = [n for n in final if n not in doomed]
        out.add("delete", the_job(("Created", 0), ("Running", 10), ("Succeeded", 601)), t(900))
        for n in kept:  # the orphan pass takes them (pods are far older than the grace)
            out.add("delete", final[n], t(901))
        return len(doomed) + len(kept)
    return len(doomed)


def build(jobs: int, *, first: int = 0, spacing: float = 2.0, prefix: str = "train") -> Stream:
    """The interleaved stream of `jobs` jobs (numbered from `first`), in time order."""
    out = _Builder()
    expected = 0
    for i in range(first, first + jobs):
        expected += job_events(i, b.T0 + timedelta(seconds=spacing * (i - first)), out, prefix)
    out.events.sort(key=lambda e: (e.time, e.seq))
    return Stream(out.events, expected, jobs)


# -- state that a long stream leaves behind, made cheaply ------------------------------------


def finished_state_templates() -> tuple[dict, list[dict]]:
    """One finished job (policy None) and its 8 terminated pods, to clone as filler state."""
    out = _Builder()
    job_events(0, b.T0, out, prefix="fill")
    job_obj = [e.obj for e in out.events if e.kind == "job"][-1]
    pods: dict[str, dict] = {}
    for e in out.events:
        if e.kind == "pod" and e.verb != "delete":
            pods[e.obj["metadata"]["name"]] = e.obj
    return job_obj, list(pods.values())


def irrelevant_pod(at: datetime) -> dict:
    """A 5 KB pod of a Deployment: what a pods watch also delivers, and no rule is about."""
    owner = b.job("PyTorchJob", "web", "shop")
    obj = b.pod(
        owner,
        "Worker",
        0,
        phase="Running",
        owner=False,
        labels=False,
        containers=[b.container_status(at=at)],
        created=at,
    )
    obj["metadata"]["name"] = "web-7d9f8b6c5-x2x4q"
    obj["metadata"]["labels"] = {"app": "web", "pod-template-hash": "7d9f8b6c5"}
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web-7d9f8b6c5",
            "uid": b.uid("rs"),
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return realistic(obj, at, 9, True)


def relevant_no_action_pod(at: datetime) -> dict:
    """A running worker of a running PyTorchJob: a training pod, and nothing to do."""
    owner = b.job("PyTorchJob", "llm-finetune", "team-01", backoff_limit=3)
    obj = b.pod(owner, "Worker", 3, phase="Running", containers=[b.container_status(at=at)], created=at)
    return realistic(obj, at, 3, True)
