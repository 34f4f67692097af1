"""Run Knative's real ApiServerSource receive adapter against the test control plane.

The adapter (knative.dev/eventing/cmd/apiserver_receive_adapter, built by gomod/ into the
podsweeper cache) is what a cluster runs for an ApiServerSource; outside a cluster it takes
the source's spec as K_SOURCE_CONFIG and a `--kubeconfig` (Knative Eventing's ApiServerSource adapter, pkg/adapter/apiserver).

Its configuration is derived from the ApiServerSource we ship, as kustomize renders knative/
(resources with their label selectors, mode), and it authenticates as the ServiceAccount user
`system:serviceaccount:podsweeper:podsweeper-source` with the permissions
knative/source/rbac.yaml grants: the e2e tests exercise the shipped source, not a copy.

It always serves health probes on :8080 (a bind failure there is ignored), so nothing else
in the tests may use port 8080; pprof goes to a free PROFILING_PORT. It is "watching" once
its reflectors have logged "Caches populated" (klog -v=2) for every watched collection:
from then on every change is sent.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

from podsweeper import kinds
from tests.support.controlplane.build import RECEIVE_ADAPTER, ensure_built
from tests.support.harness.ports import free_port
from tests.support.harness.processes import Process

REPO_ROOT = Path(__file__).resolve().parents[3]
# The install the source is rendered from (kustomize: its watch components append the entries).
SHIPPED_INSTALL = REPO_ROOT / "knative"
SOURCE_RBAC = REPO_ROOT / "knative" / "source" / "rbac.yaml"
SOURCE_USER = "source"  # the ControlPlane user key of the adapter's ServiceAccount
PROBE_PORT = 8080  # fixed in the adapter; documented so no one else binds it

_POPULATED = re.compile(r'"Caches populated".*reflector="([^"]+)"')


class AdapterError(RuntimeError):
    """The adapter exited or never started watching; the message carries its log tail."""


# -- configuration from the shipped manifest ---------------------------------------------------


def selector_string(selector: dict | None) -> str:
    """metav1.LabelSelectorAsSelector(...).String(): what the controller hands the adapter."""
    if not selector:
        return ""
    parts: list[tuple[str, str]] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        parts.append((key, f"{key}={value}"))
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], sorted(expr.get("values") or [])
        text = {
            "Exists": key,
            "DoesNotExist": f"!{key}",
            "In": f"{key} in ({','.join(values)})",
            "NotIn": f"{key} notin ({','.join(values)})",
        }.get(op)
        if text is None:
            raise ValueError(f"unknown label selector operator {op!r}")
        parts.append((key, text))
    return ",".join(text for _, text in sorted(parts))


def _gvr(api_version: str, kind: str) -> dict:
    """The resource the controller would name (by podsweeper.kinds, never guessed here): a pod,
    a training kind at one of its versions, or a link of a chain (JobSet, batch Job)."""
    group, _, version = api_version.rpartition("/")
    if (group, kind) == ("", "Pod"):
        return {"Group": "", "Version": version, "Resource": "pods"}
    found = kinds.lookup(api_version, kind) or kinds.intermediate_lookup(api_version, kind)
    if found is None:
        raise ValueError(
            f"{api_version} {kind} in the shipped ApiServerSource is neither a pod, a training kind "
            "nor a link of a training kind's chain"
        )
    return {"Group": group, "Version": version, "Resource": found.plural}


@functools.lru_cache(maxsize=1)
def _rendered_install() -> tuple[dict, ...]:
    from tests.support.tools.kustomize import render

    return tuple(render(SHIPPED_INSTALL))


def shipped_source_spec(manifest: Path | None = None) -> dict:
    """The ApiServerSource's spec in `manifest`, or, by default, as `kubectl apply -k knative/`
    installs it (rendered by the real kustomize)."""
    if manifest is None:
        docs = [copy.deepcopy(d) for d in _rendered_install()]
    else:
        docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    sources = [d for d in docs if d.get("kind") == "ApiServerSource"]
    if len(sources) != 1:
        raise ValueError(f"{manifest or SHIPPED_INSTALL} holds {len(sources)} ApiServerSources, expected one")
    return sources[0]["spec"]


def source_config(namespaces: list[str], mode: str | None = None, manifest: Path | None = None) -> dict:
    """K_SOURCE_CONFIG for the shipped ApiServerSource, restricted to `namespaces`.

    `mode` overrides the manifest's spec.mode ("Resource" or "Reference").
    """
    spec = shipped_source_spec(manifest)
    resources = []
    for res in spec["resources"]:
        watch = {"gvr": _gvr(res["apiVersion"], res["kind"])}
        selector = selector_string(res.get("selector"))
        if selector:
            watch["selector"] = selector
        resources.append(watch)
    return {
        "namespaces": list(namespaces),
        "allNamespaces": False,
        "resources": resources,
        "mode": mode or spec.get("mode") or "Reference",
    }


def install_source_rbac(admin_api) -> None:
    """Apply knative/source/rbac.yaml (the adapter's ClusterRole and its binding) as admin."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from tests.support.controlplane.manifests import apply_manifest

    try:  # knative/function/rbac.yaml creates it; do not depend on that here
        client.CoreV1Api(admin_api).create_namespace({"metadata": {"name": "podsweeper"}})
    except ApiException as error:
        if error.status != 409:
            raise
    apply_manifest(admin_api, SOURCE_RBAC)


# -- the process ---------------------------------------------------------------------------------


class ReceiveAdapter(Process):
    """One adapter process: `start()` returns once it is watching; `stop()` ends it (SIGTERM,
    which shuts down its watches and probe server, then SIGKILL).

    Use as a context manager. `config` is the K_SOURCE_CONFIG dict (see source_config()).
    """

    def __init__(
        self,
        kubeconfig: str | Path,
        config: dict,
        sink: str,
        *,
        sink_timeout: int | None = None,
        name: str = "podsweeper",
        log=sys.stderr,
        workdir: Path | None = None,
        ready_timeout: float = 60.0,
        container_env: dict[str, str] | None = None,
    ):
        self.kubeconfig = Path(kubeconfig)
        self.config = config
        self.sink = sink
        # The env of a container the eventing controller generated (tests/support/knative):
        # used as it is, instead of the one start() derives from the shipped manifest.
        self.container_env = container_env
        self.sink_timeout = sink_timeout
        self.source_name = name
        self.log = log
        self.ready_timeout = ready_timeout
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="podsweeper-adapter-"))
        mode = config.get("mode", "Reference").lower()
        log_path = self.workdir / f"adapter-{mode}-{int(time.time() * 1000)}.log"
        super().__init__("receive adapter", log_path, error=AdapterError)
        self.started_in: float | None = None

    def __enter__(self) -> ReceiveAdapter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def expected_reflectors(self) -> Counter[str]:
        """Reflector names the adapter logs, `<group>/<version>, Resource=<plural>/<ns>`, each
        as often as it runs: every entry gets its own reflectors (pkg/adapter/apiserver), so
        two entries of one kind (pods by two labels) run two reflectors of the same name."""
        names: Counter[str] = Counter()
        for res in self.config["resources"]:
            gvr = res["gvr"]
            gv = f"{gvr['Group']}/{gvr['Version']}" if gvr["Group"] else f"/{gvr['Version']}"
            if self.config.get("allNamespaces"):  # one cluster-wide reflector, named by its GVR
                names[f"{gv}, Resource={gvr['Resource']}"] += 1
                continue
            for namespace in self.config["namespaces"]:
                names[f"{gv}, Resource={gvr['Resource']}/{namespace}"] += 1
        return names

    def environment(self) -> dict[str, str]:
        if self.container_env is not None:
            # A pod's own ports: pprof on a free one (all pods share this host's network).
            return {**os.environ, **self.container_env, "PROFILING_PORT": str(free_port())}
        # What the eventing controller sets on the adapter it generates (the env
        # tests/controllers/test_knative_eventing.py reads off that Deployment), minus its
        # logging and observability JSON (defaults either way). It sets no K_SINK_TIMEOUT: a
        # send waits as long as the function takes, which bounds itself (10 s).
        env = {
            **os.environ,
            "NAME": self.source_name,
            "SYSTEM_NAMESPACE": "knative-eventing",
            "NAMESPACE": "podsweeper",  # where the ApiServerSource object lives
            "K_SINK": self.sink,
            "K_SOURCE_CONFIG": json.dumps(self.config),
            "PROFILING_PORT": str(free_port()),
        }
        if self.sink_timeout is not None:  # the bench bounds its sends
            env["K_SINK_TIMEOUT"] = str(self.sink_timeout)
        return env

    def start(self) -> ReceiveAdapter:
        binary = ensure_built(RECEIVE_ADAPTER, log=self.log)
        started = time.monotonic()
        env = self.environment()
        env.pop("KUBECONFIG", None)  # only --kubeconfig: never the caller's admin credentials
        self.launch([str(binary), f"--kubeconfig={self.kubeconfig}", "-v=2"], env=env)
        try:
            wanted = self.expected_reflectors
            self.wait("watch", lambda: not wanted - self.populated(), self.ready_timeout, interval=0.05)
        except AdapterError as error:
            missing = sorted((wanted - self.populated()).elements())
            self.stop()
            raise AdapterError(f"{error}\nnot watching: {missing}") from None
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started
        print(
            f"adapter: watching {self.expected_reflectors.total()} collection(s) in "
            f"{','.join(self.config['namespaces'])} ({self.config['mode']} mode) -> {self.sink} "
            f"after {self.started_in:.1f}s",
            file=self.log,
            flush=True,
        )
        return self

    def populated(self) -> Counter[str]:
        return Counter(_POPULATED.findall(self.text()))

    def pause(self) -> None:
        """SIGSTOP: the adapter reads and sends nothing, as a starved or descheduled pod would;
        what its watches should deliver backs up on the API server's side."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
