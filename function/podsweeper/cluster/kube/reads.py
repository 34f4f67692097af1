"""Reading the cluster's objects: jobs, pods, a chain's intermediates, nodes, container logs.

Each answer goes through the same typed edge as event payloads (objects/), straight from the
API's bytes; an object the edge cannot read is logged and left out, never half-understood.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from podsweeper import kinds
from podsweeper.cluster.base import JobPage, PodPage
from podsweeper.cluster.kube.calls import Calls, Refused, can_exist, can_label, core_path, group_path, log
from podsweeper.errors import BadEvent
from podsweeper.model import Intermediate, Job, JobRef, Namespace, Node, NodeReady, Pod
from podsweeper.objects.intermediates import decode_intermediate
from podsweeper.objects.jobs import decode_job
from podsweeper.objects.namespaces import decode_namespace
from podsweeper.objects.nodes import decode_node
from podsweeper.objects.pages import parse_intermediate_page, parse_job_page, parse_pod_page
from podsweeper.objects.pods import decode_pod
from podsweeper.ownership import CHAIN_POD_SELECTORS, TRAINING_POD_SELECTORS, job_pod_selectors, selects


class Reads(Calls):
    def knows_job(self, ref: JobRef) -> bool:
        return True  # a 404 says the job is gone

    def get_job(self, ref: JobRef) -> Job | None:
        if not can_exist(ref.namespace, ref.name):
            return None
        path = group_path(ref.kind.group, ref.version, ref.kind.plural, ref.namespace, ref.name)
        body = self._request(f"get {ref.kind.plural} {ref.namespace}/{ref.name}", "GET", path)
        return self._decoded(decode_job, body)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        if not can_exist(namespace, name):
            return None
        body = self._request(f"get pod {namespace}/{name}", "GET", core_path("pods", namespace, name))
        return self._decoded(decode_pod, body)

    def list_job_pods(self, ref: JobRef, all_label_sets: bool = False) -> list[Pod]:
        """LIST by the v1.6+ label; by the pre-v1.6 labels when that finds nothing, or always
        when `all_label_sets` (the sweep saw legacy-only pods of this job).

        An operator labels all pods of a job alike, so a finished job's event costs one LIST;
        a job whose operator was upgraded mid-job is completed by the sweep.
        """
        if not can_label(ref.namespace, ref.name):
            return []
        found: dict[str, Pod] = {}  # by uid: a pod may carry both label sets
        for selector in job_pod_selectors(ref):
            if found and not all_label_sets:
                break
            for pod in self._paged(
                parse_pod_page,
                f"list pods of {ref.namespace}/{ref.name}",
                core_path("pods", ref.namespace),
                {"labelSelector": selector},
            ):
                found.setdefault(pod.uid, pod)
        return list(found.values())

    def get_node(self, name: str) -> Node | None:
        if not can_exist("default", name):  # nodes are cluster-scoped: check the name only
            return None
        body = self._request(f"get node {name}", "GET", core_path("nodes", name=name))
        if body is None:
            return None
        try:
            return decode_node(body)
        except BadEvent as error:
            # Unreadable is not "gone": report it as Ready so the rule does nothing.
            log.warning("ignoring a node the API returned: %s", error)
            return Node(name, NodeReady.TRUE)

    def get_namespace(self, name: str) -> Namespace | None:
        if not can_exist(name, "x"):  # cluster-scoped: its name is a namespace's (a DNS label)
            return None
        body = self._request(f"get namespace {name}", "GET", core_path("namespaces", name=name))
        return self._decoded(decode_namespace, body)

    def get_intermediate(
        self, link: kinds.IntermediateKind, namespace: str, name: str
    ) -> Intermediate | None:
        if not can_exist(namespace, name):
            return None
        path = group_path(link.group, link.version, link.plural, namespace, name)
        body = self._request(f"get {link.plural} {namespace}/{name}", "GET", path)
        return self._decoded(decode_intermediate, body)

    def list_intermediates(
        self, link: kinds.IntermediateKind, namespace: str | None, selector: str
    ) -> Iterator[Intermediate]:
        yield from self._paged(
            functools.partial(parse_intermediate_page, listed=link),
            f"list {link.plural} {selector}",
            group_path(link.group, link.version, link.plural, namespace),
            {"labelSelector": selector},
        )

    def training_pod_pages(
        self, namespace: str | None, chained: bool = False, resume: str | None = None
    ) -> Iterator[PodPage]:
        """One paginated LIST per selector, in turn; a pod an earlier selector also selects is
        left out (a pod may carry both label sets). The token: the selector's index and the
        API's continue token."""
        what = "list training pods" if namespace is None else f"list training pods in {namespace}"
        selectors = TRAINING_POD_SELECTORS + (CHAIN_POD_SELECTORS if chained else ())
        first, _, token = (resume or "0 ").partition(" ")
        for index in range(int(first), len(selectors)):
            earlier = selectors[:index]
            pages = self._pages(
                parse_pod_page,
                what,
                core_path("pods", namespace),
                {"labelSelector": selectors[index]},
                token or None,
            )
            for pods, after in pages:
                fresh = [pod for pod in pods if not any(selects(s, pod.labels) for s in earlier)]
                if after:
                    yield PodPage(fresh, f"{index} {after}")
                else:
                    yield PodPage(fresh, f"{index + 1} " if index + 1 < len(selectors) else None)
            token = ""

    def job_pages(
        self, namespace: str | None, kind: kinds.TrainingKind, resume: str | None = None
    ) -> Iterator[JobPage]:
        """One paginated LIST per served version, in turn. The token: the version's index and
        the API's continue token."""
        first, _, token = (resume or "0 ").partition(" ")
        for index in range(int(first), len(kind.versions)):
            version = kind.versions[index]
            pages = self._pages(
                parse_job_page,
                f"list {kind.plural}.{version}",
                group_path(kind.group, version, kind.plural, namespace),
                None,
                token or None,
            )
            for jobs, after in pages:
                if after:
                    yield JobPage(jobs, f"{index} {after}")
                else:
                    yield JobPage(jobs, f"{index + 1} " if index + 1 < len(kind.versions) else None)
            token = ""

    def list_jobs(self, namespace: str | None, kind: kinds.TrainingKind | None = None) -> Iterator[Job]:
        for listed in kinds.TRAINING_KINDS if kind is None else (kind,):
            for version in listed.versions:
                yield from self._paged(
                    parse_job_page,
                    f"list {listed.plural}.{version}",
                    group_path(listed.group, version, listed.plural, namespace),
                )

    def container_log(
        self, namespace: str, pod: str, container: str, previous: bool, lines: int, limit_bytes: int
    ) -> str | None:
        if not can_exist(namespace, pod):
            return None
        try:
            body = self._request(
                f"read log of {namespace}/{pod}/{container}",
                "GET",
                core_path("pods", namespace, pod, "log"),
                {
                    "container": container,
                    "previous": "true" if previous else "false",
                    "tailLines": lines,
                    "limitBytes": limit_bytes,
                },
                conflicts=(400, 403, 409, 500, 502, 503),
            )
        except Refused:  # no such run or log (e.g. a node that serves none): keep the rest
            return None
        return body.decode(errors="replace") if body else None
