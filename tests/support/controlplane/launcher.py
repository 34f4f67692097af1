"""Run a real etcd + kube-apiserver on loopback for the integration tests.

Why a real API server: the function's correctness hinges on API semantics a fake gets
wrong (RBAC denials, CRD schemas, resourceVersion conflicts, deletion preconditions).
There is no kubelet, scheduler or controller manager: tests create objects directly and
play the kubelet by writing pod status; nothing garbage-collects owned pods.

Authentication is by static bearer tokens, one per identity the tests need (see USERS).
The function's user carries the exact name and groups a ServiceAccount token would, so
RBAC bound to ServiceAccount podsweeper/podsweeper applies to it unchanged.

Each component runs in its own process group (stopped with SIGTERM, then SIGKILL) and
asks the kernel to kill it if the launcher dies (PR_SET_PDEATHSIG), so no run leaves an
etcd or kube-apiserver behind. Use it as a context manager::

    with ControlPlane() as cp:
        api = cp.api_client("function")
"""

from __future__ import annotations

import atexit
import base64
import json
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml

from tests.support.controlplane.build import ETCD, KUBE_APISERVER, ensure_built
from tests.support.harness.ports import free_port
from tests.support.harness.processes import Process, wait_until

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class User:
    """A static-token identity. ``key`` is the short name used by the helper methods."""

    key: str
    username: str
    groups: tuple[str, ...]


def _service_account(namespace: str, name: str, key: str) -> User:
    return User(
        key,
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


USERS = {
    u.key: u
    for u in (
        User("admin", "podsweeper-test-admin", ("system:masters", "system:authenticated")),
        # How the function authenticates in a cluster: knative/function/rbac.yaml binds it.
        _service_account("podsweeper", "podsweeper", "function"),
        # For Knative's ApiServerSource receive adapter (e2e tests bind its RBAC themselves).
        _service_account("podsweeper", "podsweeper-source", "source"),
    )
}


class ControlPlaneError(RuntimeError):
    """A component died or did not become ready; the message carries its log tail."""


class Kube:
    """Raw admin calls to the API server, JSON in and out (no client models: CRDs are large);
    apply() is server-side apply. Errors are of the caller's class (`error`)."""

    def __init__(
        self,
        url: str,
        token: str,
        ca_file: Path,
        *,
        error: type[Exception] = RuntimeError,
        field_manager: str = "podsweeper-tests",
    ):
        self.url = url
        self.ca = str(ca_file)
        self.error = error
        self.field_manager = field_manager
        self.session = requests.Session()
        self.session.trust_env = False  # our own loopback server: no proxy, no REQUESTS_CA_BUNDLE
        self.session.headers.update({"Authorization": f"Bearer {token}", "Accept": "application/json"})
        self._resources: dict[str, dict] = {}

    def request(
        self, method: str, path: str, body=None, ok=(200, 201), content_type="application/json", params=None
    ):
        r = self.session.request(
            method,
            self.url + path,
            params=params,
            data=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type},
            verify=self.ca,
            timeout=30,
        )
        if r.status_code not in ok:
            raise self.error(f"{method} {path}: HTTP {r.status_code}: {r.text[:1500]}")
        return r.json() if r.content else {}

    def get(self, path: str) -> dict | None:
        obj = self.request("GET", path, ok=(200, 404))
        return None if obj.get("kind") == "Status" else obj

    def resource(self, api_version: str, kind: str) -> dict:
        key = f"{api_version}/{kind}"
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for r in self.request("GET", base)["resources"]:
                if "/" not in r["name"]:
                    self._resources[f"{api_version}/{r['kind']}"] = r
        if key not in self._resources:
            raise self.error(f"{key} is not served")
        return self._resources[key]

    def path(self, api_version: str, kind: str, name: str | None = None, namespace: str | None = None) -> str:
        r = self.resource(api_version, kind)
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if r["namespaced"]:
            path += f"/namespaces/{namespace}"
        path += f"/{r['name']}"
        return f"{path}/{name}" if name else path

    def path_of(self, obj: dict) -> str:
        meta = obj["metadata"]
        return self.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))

    def apply(self, obj: dict) -> dict:
        params = {"fieldManager": self.field_manager, "force": "true"}
        return self.request(
            "PATCH", self.path_of(obj), obj, content_type="application/apply-patch+yaml", params=params
        )

    def close(self) -> None:
        self.session.close()


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, with the Kubeflow CRDs and function RBAC.

    Attributes once started: ``url``, ``ca_file``, ``admin_kubeconfig``,
    ``function_kubeconfig``, ``workdir`` and ``timings`` (seconds per phase).
    """

    def __init__(
        self,
        *,
        install_crds: bool = True,
        install_rbac: bool = True,
        mpi_operator: bool = False,
        audit: bool = False,
        log=sys.stderr,
        ready_timeout: float = 90.0,
        apiserver_args: tuple[str, ...] = (),
        service_accounts: bool = False,
    ):
        self.install_crds = install_crds
        self.apiserver_args = apiserver_args  # more kube-apiserver flags (an admission plugin)
        # The ServiceAccount admission plugin on (a pod gets its token volume, as on a cluster):
        # only for a world whose controller manager makes each namespace's `default` and
        # publishes kube-root-ca.crt (World(service_accounts=True)).
        self.service_accounts = service_accounts
        self.audit = audit  # log the function's writes (tests/support/audit.py reads them)
        self.install_rbac = install_rbac
        self.mpi_operator = mpi_operator  # serve the mpi-operator's MPIJob v2beta1, not v1
        self.log = log
        self.ready_timeout = ready_timeout
        self.tokens = {key: secrets.token_hex(16) for key in USERS}
        self.timings: dict[str, float] = {}
        self.workdir: Path | None = None
        self.url = ""
        self.ca_file: Path | None = None
        self._components: list[Process] = []
        self._kubeconfigs: dict[str, Path] = {}

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, attempts: int = 3) -> ControlPlane:
        """Build binaries if missing, start both components, wait for /readyz, install manifests."""
        t0 = time.monotonic()
        etcd_bin = ensure_built(ETCD, log=self.log)
        apiserver_bin = ensure_built(KUBE_APISERVER, log=self.log)
        self.timings["build"] = time.monotonic() - t0
        try:
            for attempt in range(1, attempts + 1):
                try:
                    self._start_once(etcd_bin, apiserver_bin)
                    break
                except ControlPlaneError as e:
                    # Free ports are only free when picked; another process may grab one.
                    clash = any("address already in use" in c.text() for c in self._components)
                    if not clash or attempt == attempts:
                        raise
                    self._say(f"port clash, retrying ({e.args[0].splitlines()[0]})")
                    self.stop()
            t1 = time.monotonic()
            self._install()
            self.timings["manifests"] = time.monotonic() - t1
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0
        self._say(
            f"ready at {self.url} in {self.timings['total']:.1f}s "
            f"(apiserver {self.timings['apiserver']:.1f}s, "
            f"manifests {self.timings.get('manifests', 0):.1f}s)"
        )
        return self

    def _start_once(self, etcd_bin: Path, apiserver_bin: Path) -> None:
        t0 = time.monotonic()
        atexit.register(self.stop)  # stop() unregisters it
        self.workdir = Path(tempfile.mkdtemp(prefix="podsweeper-cp-"))
        # cryptography (the integration extra) only once a control plane starts: the unit rung imports
        # this module (its docs check reads the apiserver tests) on the [test] extra alone.
        from tests.support.controlplane import pki as pki_mod

        keys = pki_mod.generate(self.workdir / "pki")
        self.ca_file = keys.ca_cert
        token_file = self.workdir / "tokens.csv"
        token_file.write_text(
            "".join(
                f'{self.tokens[u.key]},{u.username},{u.username},"{",".join(u.groups)}"\n'
                for u in USERS.values()
            )
        )
        token_file.chmod(0o600)

        client_port, peer_port, secure_port = free_port(), free_port(), free_port()
        client_url = f"http://127.0.0.1:{client_port}"
        self.etcd_url = client_url  # etcd's own API (a test compacts its history)
        peer_url = f"http://127.0.0.1:{peer_port}"
        self._say(f"starting etcd on {client_url}")
        self._components.append(
            self._launch(
                "etcd",
                [
                    str(etcd_bin),
                    "--name=podsweeper",
                    f"--data-dir={self.workdir / 'etcd'}",
                    f"--listen-client-urls={client_url}",
                    f"--advertise-client-urls={client_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=podsweeper={peer_url}",
                    "--unsafe-no-fsync",  # throwaway data: durability only costs time
                    "--log-level=warn",
                ],
            )
        )

        self.url = f"https://127.0.0.1:{secure_port}"
        self._say(f"starting kube-apiserver on {self.url}")
        # Started right away: it retries etcd until it answers, which overlaps their startups.
        self._components.append(
            self._launch(
                "kube-apiserver",
                [
                    str(apiserver_bin),
                    f"--etcd-servers={client_url}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={secure_port}",
                    f"--cert-dir={self.workdir / 'certs'}",
                    f"--tls-cert-file={keys.serving_cert}",
                    f"--tls-private-key-file={keys.serving_key}",
                    f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                    f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                    f"--service-account-key-file={keys.sa_key}",
                    f"--service-account-signing-key-file={keys.sa_key}",
                    f"--token-auth-file={token_file}",
                    "--authorization-mode=RBAC",
                    # No controller manager creates `default` ServiceAccounts, which this plugin requires.
                    *(() if self.service_accounts else ("--disable-admission-plugins=ServiceAccount",)),
                    # Nothing to reconcile: there is no kubernetes Service backend on loopback.
                    "--endpoint-reconciler-type=none",
                    "--allow-privileged=true",
                    "--profiling=false",
                    *(self._audit_flags() if self.audit else ()),
                    *self.apiserver_args,
                ],
            )
        )
        self._wait_ready()
        self.timings["apiserver"] = time.monotonic() - t0

    def _audit_flags(self) -> list[str]:
        from tests.support.audit import write_policy

        assert self.workdir is not None
        policy = write_policy(self.workdir / "audit-policy.yaml", USERS["function"].username)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # each event is on disk before the answer goes out
        ]

    @property
    def audit_log(self) -> Path:
        assert self.workdir is not None, "control plane is not running"
        return self.workdir / "audit.log"

    def kill(self, name: str) -> None:
        """SIGKILL one component ("etcd" or "kube-apiserver"), as a crash or an OOM kill would."""
        self._component(name).kill()
        self._say(f"{name} killed")

    def revive(self, name: str) -> None:
        """Start a killed component again with the same flags, data and port; for the API
        server, return once it is ready."""
        self._component(name).relaunch()  # same flags, data directory and port; same log
        if name == "kube-apiserver":
            self._wait_ready()
        self._say(f"{name} restarted")

    def _launch(self, name: str, argv: list[str]) -> Process:
        assert self.workdir is not None
        return Process(name, self.workdir / f"{name}.log", error=ControlPlaneError).launch(
            argv, cwd=self.workdir
        )

    def _component(self, name: str) -> Process:
        found = [c for c in self._components if c.name == name]
        if not found:
            raise ValueError(f"no component {name!r}: {[c.name for c in self._components]}")
        return found[0]

    def _wait_ready(self) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.tokens['admin']}"
        last = [""]

        def ready() -> bool:
            try:
                r = session.get(f"{self.url}/readyz", verify=str(self.ca_file), timeout=5)
                if r.status_code == 200:
                    return True
                last[0] = f"HTTP {r.status_code}: {r.text[-500:]}"
            except requests.RequestException as e:
                last[0] = str(e)
            return False

        self.check_alive()
        apiserver = self._component("kube-apiserver")
        wait_until(
            "kube-apiserver /readyz",
            ready,
            timeout=self.ready_timeout,
            check=self.check_alive,
            tails=lambda: f"(last answer: {last[0]}); {apiserver.last_lines(30)}",
            error=ControlPlaneError,
        )

    def _install(self) -> None:
        from tests.support.controlplane import manifests  # imports the kubernetes client: not needed before

        api = self.api_client("admin")
        try:
            if self.install_crds:
                self._say("installing Kubeflow training, Trainer v2 and JobSet CRDs")
                # ~5 MB of schemas in all; a loaded machine needs more than the default 30 s.
                manifests.install_crds(api, manifests.all_crds(self.mpi_operator), timeout=90)
            if self.install_rbac:
                manifests.apply_manifest(api, manifests.FUNCTION_RBAC)
                manifests.apply_manifest(api, manifests.FUNCTION_ADMISSION)
        finally:
            api.close()

    def check_alive(self) -> None:
        """Raise ControlPlaneError (with the log tail) if a component has exited."""
        for component in self._components:
            component.check()

    def stop(self) -> None:
        """Stop the API server, then etcd, and remove the work directory. Idempotent."""
        # kube-apiserver's graceful shutdown stalls once etcd is gone: don't wait long then.
        crashed = any(not c.alive() for c in self._components)
        for component in reversed(self._components):
            component.stop(timeout=2.0 if crashed else 10.0)
        self._components.clear()
        self._kubeconfigs.clear()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        atexit.unregister(self.stop)

    # -- clients -----------------------------------------------------------------------

    def kubeconfig_dict(self, user: str = "admin", namespace: str | None = None) -> dict:
        u = USERS[user]
        context: dict = {"cluster": "podsweeper", "user": u.key}
        if namespace:
            context["namespace"] = namespace
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "podsweeper",
                    "cluster": {
                        # Inline CA, so the file stays usable wherever it is copied (e.g. into a container).
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self.ca_file.read_bytes()).decode(),
                    },
                }
            ],
            "users": [{"name": u.key, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": u.key, "context": context}],
            "current-context": u.key,
        }

    def write_kubeconfig(self, path, user: str = "admin", namespace: str | None = None) -> Path:
        """Write a kubeconfig for one of USERS ("admin", "function", "source") to path."""
        path = Path(path)
        path.write_text(yaml.safe_dump(self.kubeconfig_dict(user, namespace), sort_keys=False))
        path.chmod(0o600)
        return path

    def kubeconfig(self, user: str = "admin") -> Path:
        """A kubeconfig file for user inside the work directory (valid while running)."""
        if user not in self._kubeconfigs:
            assert self.workdir is not None, "control plane is not running"
            self._kubeconfigs[user] = self.write_kubeconfig(self.workdir / f"kubeconfig-{user}", user)
        return self._kubeconfigs[user]

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig("admin")

    @property
    def function_kubeconfig(self) -> Path:
        return self.kubeconfig("function")

    def api_client(self, user: str = "admin"):
        """A kubernetes.client.ApiClient authenticated as user, built from its kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig(user)))

    def _say(self, message: str) -> None:
        print(f"control plane: {message}", file=self.log, flush=True)
