"""Security properties: bounded bodies, no code execution from input, no secrets in logs, least privilege.

* Request bodies beyond PODSWEEPER_MAX_BODY_BYTES are refused (400), with or without a
  Content-Length, without the server reading them whole.
* The package never evaluates, executes, unpickles or shells out (an AST scan of function/).
* Pods carry WANDB_API_KEY=secret-do-not-log (tests/fixtures/builders.py); no log line,
  decision, Kubernetes Event, HTTP answer or replay output of the function ever shows it.
* The shipped RBAC (knative/function/rbac.yaml, and each opt-in overlay's): as the function's
  user, every verb on every resource the API server serves, by real requests and by access
  reviews, is allowed exactly where tests/fixtures/facts.py's literal table says, and refused
  (by the authorizer's 403) everywhere else; no answer shows a Secret's value.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from podsweeper.config import Settings
from tests.fixtures import facts, scenarios
from tests.fixtures.builders import SECRET, at, event, job, ping, pod
from tests.fixtures.builders import container_status as cs
from tests.support import figures
from tests.support.controlplane.launcher import USERS
from tests.support.harness.served import Served, binary_headers, unreachable_kubeconfig
from tests.support.stack.players import Play

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "function" / "podsweeper"
BODY_LIMIT = 65_536

# -- no shell, no eval -------------------------------------------------------------------------

BANNED_CALLS = {"eval", "exec", "compile", "__import__", "execfile", "input"}
BANNED_MODULES = {
    "subprocess",
    "pickle",
    "cPickle",
    "marshal",
    "shelve",
    "dill",
    "pty",
    "commands",
    "importlib",
    "code",
    "codeop",
    "ctypes",
}
# Submodules of a banned module that load no code: reading an installed package's metadata.
ALLOWED_MODULES = {"importlib.metadata"}
BANNED_ATTRIBUTES = {
    ("os", "system"),
    ("os", "popen"),
    ("os", "execv"),
    ("os", "execve"),
    ("os", "execl"),
    ("os", "execlp"),
    ("os", "execvp"),
    ("os", "spawnl"),
    ("os", "spawnv"),
    ("os", "fork"),
    ("os", "posix_spawn"),
    ("yaml", "load"),
    ("yaml", "unsafe_load"),
    ("yaml", "full_load"),
    ("yaml", "load_all"),
    ("yaml", "unsafe_load_all"),
}


def _banned_module(name: str) -> bool:
    return name.split(".")[0] in BANNED_MODULES and name not in ALLOWED_MODULES


def banned_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BANNED_CALLS:
            found.append(f"{where} calls {node.func.id}()")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in BANNED_ATTRIBUTES
        ):
            found.append(f"{where} uses {node.value.id}.{node.attr}")
        if isinstance(node, ast.Import):
            found += [f"{where} imports {a.name}" for a in node.names if _banned_module(a.name)]
        if isinstance(node, ast.ImportFrom) and _banned_module(node.module or ""):
            found.append(f"{where} imports from {node.module}")
        if isinstance(node, ast.keyword) and node.arg == "shell":
            found.append(f"{where} passes shell=")
    return found


# The scan is not vacuous: it found the package (28 files when this floor was set).
AT_LEAST_PACKAGE_FILES = 25


def test_the_package_never_evaluates_executes_unpickles_or_shells_out():
    files = sorted(PACKAGE.rglob("*.py"))
    assert figures.within(
        "security: package files scanned for eval/exec/shell/pickle/yaml.load",
        len(files),
        ">=",
        AT_LEAST_PACKAGE_FILES,
    ), [str(f) for f in files]
    problems = [problem for path in files for problem in banned_uses(path)]
    assert not problems, problems


def test_the_scan_would_see_them():
    """The scanner itself: each banned form in a snippet is reported."""
    snippet = (
        "import subprocess, pickle\nfrom importlib import import_module\nimport os, yaml\n"
        "eval('1')\nexec('x=1')\nos.system('id')\nyaml.load('a')\nsubprocess.run('id', shell=True)\n"
    )
    path = PACKAGE.parent / "out" / "banned_snippet.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(snippet)
    try:
        found = " ".join(banned_uses(path))
    finally:
        path.unlink()
    for needle in (
        "imports subprocess",
        "imports pickle",
        "importlib",
        "calls eval",
        "calls exec",
        "os.system",
        "yaml.load",
        "shell=",
    ):
        assert needle in found, needle


# -- request body limit ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """A served function with a 64 KiB body limit and no API behind it."""
    directory = tmp_path_factory.mktemp("limited")
    kubeconfig = unreachable_kubeconfig(directory)
    with Served(
        {
            "KUBECONFIG": str(kubeconfig),
            "PODSWEEPER_MAX_BODY_BYTES": str(BODY_LIMIT),
            "PODSWEEPER_EVENT_TIMEOUT_SECONDS": "2",
        },
        directory / "server.log",
    ) as served:
        yield served


def irrelevant(padding: int = 0) -> tuple[dict, bytes]:
    """A pod of no job (answered 200 without any API call), padded to a size."""
    raw = event("update", pod(job(), "Worker", 0, phase="Running", owner=False, labels=False), at(1))
    raw["data"]["metadata"]["annotations"] = {"pad": "x" * padding}
    return raw, json.dumps(raw["data"]).encode()


def test_body_limit_with_content_length(limited):
    raw, body = irrelevant()
    fill = BODY_LIMIT - len(body)
    at_limit = irrelevant(fill)[1]
    assert len(at_limit) == BODY_LIMIT
    assert (
        requests.post(limited.url, data=at_limit, headers=binary_headers(raw), timeout=10).status_code == 200
    )
    over = irrelevant(fill + 1)[1]
    response = requests.post(limited.url, data=over, headers=binary_headers(raw), timeout=10)
    assert response.status_code == 400 and "limit" in response.text
    huge = b"x" * (50 * 1024 * 1024)
    started = time.monotonic()
    response = requests.post(limited.url, data=huge, headers=binary_headers(raw), timeout=30)
    assert response.status_code == 400
    seconds = time.monotonic() - started
    assert figures.within("security: s to refuse a 50 MiB body", seconds, "<", 10), seconds
    assert limited.healthy()


def test_body_limit_without_content_length(limited):
    """Chunked transfer: the limit holds on what is read, the rest is never buffered."""
    raw, _ = irrelevant()
    rss = limited.rss()

    def chunks():
        for _ in range(400):  # 400 x 64 KiB = 25 MiB
            yield b"{" + b" " * 65_535

    response = requests.post(limited.url, data=chunks(), headers=binary_headers(raw), timeout=60)
    assert response.status_code == 400 and "limit" in response.text
    growth_mib = (limited.rss() - rss) / 1024 / 1024
    assert figures.within("security: RSS growth MiB refusing 25 MiB chunked", growth_mib, "<", 16), growth_mib
    assert (
        requests.post(limited.url, data=irrelevant()[1], headers=binary_headers(raw), timeout=10).status_code
        == 200
    )


def test_default_body_limit_is_four_mebibytes():
    limit = Settings().max_body_bytes
    assert figures.within("security: default body limit MiB", limit / 1024 / 1024, "==", 4), limit


# -- no secrets in logs ------------------------------------------------------------------------


def assert_no_secret(text: str, where: str) -> None:
    assert SECRET not in text, f"{where} shows a pod's env value"


def test_every_decision_path_logs_no_env_value(control_plane, admin_api, namespace, tmp_path):
    """Deletes with evidence, warnings, skips, dry-run, 400s and 503s: the secret appears nowhere."""
    operator = Play(admin_api, namespace, node=None)
    finished = operator.create_job(name="done")
    for index in range(2):
        worker = operator.create_pod(finished, "Worker", index)
        operator.set_pod_status(
            worker, "Running", [cs(state="waiting", reason="CrashLoopBackOff", restarts=9, last_exit=137)]
        )
    skipped = operator.create_pod(finished, "Worker", 5, annotations={"podsweeper.dev/skip": "true"})
    operator.set_pod_status(skipped, "Running", [cs()])
    finished = operator.set_job_conditions(finished, [("Created", at(0)), ("Succeeded", at(30))])
    looping = operator.create_job(kind="TFJob", name="loop")  # no backoffLimit: warnings
    for index in range(2):
        worker = operator.create_pod(looping, "Worker", index)
        operator.set_pod_status(
            worker, "Running", [cs(state="waiting", reason="CrashLoopBackOff", restarts=9)]
        )
    gone = operator.create_job(kind="JAXJob", name="gone")
    operator.create_pod(gone, "Worker", 0)
    operator.custom.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "jaxjobs", "gone")

    kubeconfig = control_plane.write_kubeconfig(tmp_path / "function.kubeconfig", "function")
    base = {
        "KUBECONFIG": str(kubeconfig),
        "PODSWEEPER_NAMESPACES": namespace,
        "PODSWEEPER_ORPHAN_GRACE_SECONDS": "0",
    }
    answers = []
    events = [
        event("add", looping, at(1)),
        event("update", looping_pod(operator, "loop-worker-0"), at(2)),
        event("update", finished, at(30)),
        event("delete", gone, at(31)),
        ping(at(40)),
    ]
    with Served({**base, "PODSWEEPER_DRY_RUN": "true"}, tmp_path / "dry.log") as dry:
        answers += [post(dry, raw) for raw in events]
        dry_log = dry.log()
    with Served(base, tmp_path / "live.log") as live:
        answers += [post(live, raw) for raw in events]
        bad = dict(event("update", looping_pod(operator, "loop-worker-1"), at(3)))
        bad["data"] = {**bad["data"], "status": {"phase": ["not", "a", "phase", SECRET]}}
        answers.append(post(live, bad))
        live_log = live.log()
        decisions = live.decisions()
    assert {"deleted", "warned", None} <= {d["result"] for d in decisions}, decisions
    # The dry-run server decided too: its log is not checked empty.
    assert "dry-run" in {d["result"] for d in dry.decisions()}, dry_log[-2000:]
    assert {"skip", "delete", "warn"} <= {d["action"] for d in decisions}
    assert operator.events("PodsCleanedUp") and operator.events("CrashLoopWithoutLimit")
    for text, where in (
        (dry_log, "the dry-run server's log"),
        (live_log, "the server's log"),
        (json.dumps(decisions), "a decision line"),
    ):
        assert_no_secret(text, where)
    for item in operator.core.list_namespaced_event(namespace).items:
        assert_no_secret(item.message or "", f"Event {item.reason}")
    for status, text in answers:
        assert_no_secret(text, f"an HTTP answer ({status})")
    figures.add("security: log lines checked for env values", dry_log.count("\n") + live_log.count("\n"))


def looping_pod(operator: Play, name: str) -> dict:
    return json.loads(
        operator.core.read_namespaced_pod(name, operator.namespace, _preload_content=False).data
    )


def post(served: Served, raw: dict) -> tuple[int, str]:
    response = requests.post(
        served.url, data=json.dumps(raw.get("data")), headers=binary_headers(raw), timeout=30
    )
    return response.status_code, response.text


def test_replay_output_shows_no_env_value(tmp_path):
    """The replay prints decisions and a timeline from whole pods: never their env."""
    files = [str(path) for path in sorted(Path(scenarios.__file__).parent.glob("*.jsonl"))]
    assert files and all(SECRET in Path(f).read_text() for f in files[:1])
    for flags in ([], ["--json"]):
        result = subprocess.run(
            [sys.executable, "-m", "podsweeper", "replay", *files, *flags],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr
        assert_no_secret(result.stdout + result.stderr, f"replay {' '.join(flags)}")


# -- least privilege ---------------------------------------------------------------------------
# What the function's ServiceAccount may do is written out literally (tests/fixtures/facts.py,
# one table per RBAC manifest), never derived from podsweeper.kinds: a new kind or link in
# the package must not widen what these tests accept. Every verb is asked, on every resource
# the API server serves and on the ones our manifests name or must never name, and the
# allowed set must equal the table exactly. A refusal is counted only from a 403 the
# authorizer gave (or a review that says allowed: false); an allowed request (a 404 for an
# object that does not exist, a 400/422 for an empty body) is never counted as one.

PROBE_NAME = "podsweeper-probe"  # no object has this name
NO_LABEL = "podsweeper.dev/probe=none"  # no object has this label


@dataclass(frozen=True)
class Resource:
    """One resource (or subresource) the API server serves at one group/version."""

    prefix: str  # /api/v1 or /apis/<group>/<version>
    group: str
    name: str  # plural, or plural/subresource
    namespaced: bool
    verbs: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.name)


def discover(session: requests.Session, url: str) -> list[Resource]:
    """Every resource and subresource the API serves, at every group/version it serves."""
    found = []
    prefixes = [("", f"/api/{v}") for v in session.get(f"{url}/api").json()["versions"]]
    for group in session.get(f"{url}/apis").json()["groups"]:
        prefixes += [(group["name"], f"/apis/{v['groupVersion']}") for v in group["versions"]]
    for group, prefix in prefixes:
        for r in session.get(f"{url}{prefix}").json()["resources"]:
            found.append(Resource(prefix, group, r["name"], r["namespaced"], tuple(r.get("verbs") or ())))
    return found


def session(control_plane, user: str) -> requests.Session:
    """Raw HTTPS as one of the control plane's users (trust_env off: REQUESTS_CA_BUNDLE would win)."""
    s = requests.Session()
    s.trust_env = False
    s.headers["Authorization"] = f"Bearer {control_plane.tokens[user]}"
    s.verify = str(control_plane.ca_file)
    return s


def verb_request(verb: str, base: str, name: str = PROBE_NAME) -> tuple[str, str, dict]:
    """The real request that asks `verb` of a collection path (method, path, requests kwargs).
    Writes are dry runs, of empty bodies, of objects that do not exist: an allowed one changes
    nothing either (deletecollection also selects by a label nothing carries)."""
    named = f"{base}/{name}"
    dry = {"dryRun": "All"}
    return {
        "get": ("GET", named, {}),
        "list": ("GET", base, {"params": {"limit": "1"}}),
        "watch": ("GET", base, {"params": {"watch": "true", "timeoutSeconds": "1"}}),
        "create": ("POST", base, {"params": dry, "json": {}}),
        "update": ("PUT", named, {"params": dry, "json": {}}),
        "patch": (
            "PATCH",
            named,
            {"params": dry, "data": "{}", "headers": {"Content-Type": "application/merge-patch+json"}},
        ),
        "delete": ("DELETE", named, {"params": dry}),
        "deletecollection": ("DELETE", base, {"params": {**dry, "labelSelector": NO_LABEL}}),
    }[verb]


class Prober:
    """Asks the API server what the function's user may do, and tallies the answers."""

    def __init__(self, control_plane, user: str = "function"):
        self.url = control_plane.url
        self.session = session(control_plane, user)
        self.user = USERS[user].username
        self.requests = self.refused = self.reviews = self.reviews_refused = 0
        self.problems: list[str] = []

    def ask(self, verb: str, method: str, path: str, **kw) -> bool:
        """A real request; True when the authorizer let it through (any answer but its 403)."""
        self.requests += 1
        answer = self.session.request(method, f"{self.url}{path}", timeout=10, **kw)
        if SECRET in answer.text:
            self.problems.append(f"{method} {path}: the answer shows a Secret's value")
        if answer.status_code == 403:
            message = answer.json().get("message", "")
            # The authorizer's refusal names the user and the verb; an admission plugin's 403
            # would come only after the authorizer allowed the request.
            if f'User "{self.user}" cannot {verb}' not in message:
                self.problems.append(f"{method} {path}: 403 but not the authorizer's: {message}")
                return True
            self.refused += 1
            return False
        if answer.status_code in (401, 429) or answer.status_code >= 500:
            self.problems.append(f"{method} {path}: {answer.status_code} {answer.text[:200]}")
        return True

    def review(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        """A SelfSubjectAccessReview as the user; True when it says allowed."""
        self.reviews += 1
        name, _, subresource = resource.partition("/")
        attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": name}
        answer = self.session.post(
            f"{self.url}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            json={"spec": {"resourceAttributes": {**attributes, "subresource": subresource}}},
            timeout=10,
        )
        answer.raise_for_status()
        allowed = bool(answer.json()["status"].get("allowed"))
        self.reviews_refused += not allowed
        return allowed

    def reviewed_table(self, keys, namespace: str) -> facts.Permissions:
        table = {}
        for group, resource in keys:
            verbs = frozenset(v for v in facts.VERBS if self.review(v, group, resource, namespace))
            if verbs:
                table[(group, resource)] = verbs
        return table


def difference(granted: facts.Permissions, expected: facts.Permissions) -> str:
    wider = {k: sorted(v - expected.get(k, frozenset())) for k, v in granted.items()}
    narrower = {k: sorted(v - granted.get(k, frozenset())) for k, v in expected.items()}
    return (
        f"allowed beyond the table: { {k: v for k, v in sorted(wider.items()) if v} }; "
        f"in the table but refused: { {k: v for k, v in sorted(narrower.items()) if v} }"
    )


# Every resource our manifests name, and the ones they must never name: probed whether or not
# this API server serves them (by review when it does not).
LITERAL_KEYS = sorted(
    {*facts.FUNCTION_RBAC, *facts.SOURCE_RBAC, *facts.SUSPEND_RBAC, *facts.NODES_RBAC, *facts.TRAINJOBS_RBAC}
    | {*facts.EVERY_USER, *facts.UNNAMED}
)
# The base: knative/function/rbac.yaml, and what Kubernetes grants every authenticated user.
BASE = facts.merged(facts.FUNCTION_RBAC, facts.EVERY_USER)
# Not vacuous (kube-apiserver v1.36.3 with the training operator's, Trainer's and JobSet's
# CRDs: 78 top-level resources at 25 group/versions, 70 of them deletable, 56 subresources;
# 631 real requests of which 596 refused, 744 reviews of which 708 refused, when these floors
# were set; kube-apiserver and the CRDs are pinned, so they move only with them).
AT_LEAST_DELETABLE, AT_LEAST_REFUSED, AT_LEAST_REVIEWS_REFUSED = 60, 560, 670


def test_the_shipped_rbac_allows_exactly_its_table_and_refuses_everything_else(
    control_plane, admin_api, namespace
):
    admin = session(control_plane, "admin")
    url = control_plane.url
    admin.post(
        f"{url}/api/v1/namespaces/{namespace}/secrets",
        json={"metadata": {"name": "token"}, "stringData": {"key": SECRET}},
    ).raise_for_status()
    probe = Prober(control_plane)
    resources = discover(admin, url)
    served = {r.key for r in resources}
    assert served >= set(facts.FUNCTION_RBAC) | {("", "secrets"), ("apps", "deployments"), ("", "nodes")}

    # Real requests: every verb on every top-level resource at every group/version served, in
    # a namespace for the namespaced ones (the Secret's own name for secrets, so a granted
    # read would show its value).
    granted: dict[tuple[str, str], set[str]] = {}
    for r in resources:
        if "/" in r.name:
            continue
        base = f"{r.prefix}/namespaces/{namespace}/{r.name}" if r.namespaced else f"{r.prefix}/{r.name}"
        for verb in facts.VERBS:
            method, path, kw = verb_request(verb, base, "token" if r.name == "secrets" else PROBE_NAME)
            if probe.ask(verb, method, path, **kw):
                granted.setdefault(r.key, set()).add(verb)
    # Secrets across all namespaces, and nothing around the RBAC: evicting, exec,
    # impersonating, granting itself more.
    for verb, method, path, kw in (
        ("list", "GET", "/api/v1/secrets", {}),
        ("watch", "GET", "/api/v1/secrets", {"params": {"watch": "true", "timeoutSeconds": "1"}}),
        (
            "create",
            "POST",
            f"/api/v1/namespaces/{namespace}/pods/p/eviction",
            {"json": {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}},
        ),
        ("create", "POST", f"/api/v1/namespaces/{namespace}/pods/p/exec", {"params": {"command": "id"}}),
        ("get", "GET", f"/api/v1/namespaces/{namespace}/pods/p/log", {}),  # allowed (evidence)
        (
            "impersonate",
            "GET",
            "/api/v1/namespaces",
            {"headers": {"Impersonate-User": "podsweeper-test-admin"}},
        ),
        (
            "create",
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "json": {
                    "metadata": {"name": "escalate"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "cluster-admin",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "podsweeper", "namespace": "podsweeper"}],
                }
            },
        ),
    ):
        allowed = probe.ask(verb, method, path, **kw)
        assert allowed is path.endswith("/log"), (method, path, allowed, probe.problems[-1:])

    # Reviews: every verb on every subresource served, and on the literal keys this API
    # server does not serve, in the namespace; and every verb on the literal keys across all
    # namespaces (the function LISTs pods and jobs cluster-wide). A ClusterRole grants in every
    # namespace what it grants across them, so the namespace's probe above sees any widening.
    subresources = sorted({r.key for r in resources if "/" in r.name})
    unserved = [key for key in LITERAL_KEYS if key not in served]
    granted |= probe.reviewed_table(subresources + unserved, namespace)
    assert not probe.problems, probe.problems
    assert granted == BASE, difference(granted, BASE)
    everywhere = probe.reviewed_table(LITERAL_KEYS, "")
    assert everywhere == BASE, f"across all namespaces: {difference(everywhere, BASE)}"

    deletable = sum(1 for r in resources if "/" not in r.name and "delete" in r.verbs)
    assert figures.within("security: resource types probed for delete", deletable, ">=", AT_LEAST_DELETABLE)
    figures.add("security: real requests as the function user", probe.requests)
    figures.add("security: access reviews as the function user", probe.reviews)
    assert figures.within(
        "security: RBAC requests refused as the function user", probe.refused, ">=", AT_LEAST_REFUSED
    )
    assert figures.within(
        "security: access reviews refused as the function user",
        probe.reviews_refused,
        ">=",
        AT_LEAST_REVIEWS_REFUSED,
    )


# The opt-in overlays: each adds exactly its table to the base, nothing else.
OVERLAYS = {
    "crashloop-suspend": ("knative/overlays/crashloop-suspend/suspend-rbac.yaml", facts.SUSPEND_RBAC),
    "stuck-terminating": ("knative/overlays/stuck-terminating/nodes-rbac.yaml", facts.NODES_RBAC),
    "trainjob-ttl": ("knative/overlays/trainjob-ttl/trainjobs-rbac.yaml", facts.TRAINJOBS_RBAC),
}


@pytest.mark.parametrize("overlay", list(OVERLAYS))
def test_each_opt_in_overlay_adds_exactly_its_table(control_plane, admin_api, overlay):
    import yaml
    from kubernetes import client

    manifest, table = OVERLAYS[overlay]
    role, binding = [d for d in yaml.safe_load_all((ROOT / manifest).read_text()) if d]
    assert (role["kind"], binding["kind"]) == ("ClusterRole", "ClusterRoleBinding")
    expected = facts.merged(BASE, table)
    (group, resource), verbs = next(iter(table.items()))
    verb = sorted(verbs)[0]
    probe = Prober(control_plane)
    rbac = client.RbacAuthorizationV1Api(admin_api)
    rbac.create_cluster_role(role)
    rbac.create_cluster_role_binding(binding)
    try:
        # The authorizer learns RBAC changes from its informer: allow it a moment.
        deadline = time.monotonic() + 10
        while not probe.review(verb, group, resource, "team-a"):
            assert time.monotonic() < deadline, f"{overlay}: its grant never showed"
            time.sleep(0.05)
        found = probe.reviewed_table(LITERAL_KEYS, "team-a")
        assert found == expected, f"{overlay}: {difference(found, expected)}"
        # Across all namespaces too (a ClusterRoleBinding: reads nodes, patches or deletes jobs anywhere).
        found = probe.reviewed_table(sorted(table), "")
        wanted = {key: expected[key] for key in table}
        assert found == wanted, f"{overlay}, all namespaces: {difference(found, wanted)}"
    finally:
        rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        rbac.delete_cluster_role(role["metadata"]["name"])
        # Gone again before the next test runs as the function's user.
        deadline = time.monotonic() + 10
        while probe.review(verb, group, resource, "team-a") and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not probe.review(verb, group, resource, "team-a"), f"{overlay}: still granted after removal"


# -- what RBAC cannot narrow: the admission policy on the function's writes -------------------
# knative/function/admission-policy.yaml, applied with the RBAC at the control plane's start
# (tests/support/controlplane/manifests.py). Every request below is one the function's RBAC
# allows (the access review says so first); the policy alone refuses the ones podsweeper never
# makes, with a 403 that names it, and lets through the ones it does make. All writes are dry
# runs (validating admission judges them all the same), so the cases share their objects.

POLICY = "podsweeper-function-writes"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
DRY = {"dryRun": "All"}
# Generous for the policy's informer on a busy 2-core machine (it is there in ~1 s).
POLICY_SYNC_SECONDS = 30


def _configmap(namespace: str, name: str, labels: dict | None = None) -> dict:
    metadata: dict = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}


def _event(namespace: str, name: str, api_version: str, kind: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "name": "x", "namespace": namespace},
        "reason": "Probe",
        "message": "probe",
        "type": "Warning",
    }


def _plain_job(name: str, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
            }
        },
    }


def _jobset(name: str, owner: dict | None = None, template_labels: dict | None = None) -> dict:
    template: dict = {
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
            }
        }
    }
    if template_labels:
        template["metadata"] = {"labels": template_labels}
    metadata: dict = {"name": name}
    if owner:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {"replicatedJobs": [{"name": "w", "template": template}]},
    }


def _bare_pod(name: str, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@dataclass(frozen=True)
class Write:
    """One write as the function's user: the RBAC verb it needs, and the real request."""

    what: str
    verb: str
    group: str
    resource: str
    namespace: str
    method: str
    path: str
    kw: dict


def _writes_world(admin: requests.Session, url: str, namespace: str) -> dict[str, str]:
    """As admin: the objects the cases act on. Returns the uids the legitimate patches carry."""

    def create(path: str, body: dict) -> dict:
        answer = admin.post(f"{url}{path}", json=body)
        if answer.status_code == 409:
            return admin.get(f"{url}{path}/{body['metadata']['name']}").json()
        answer.raise_for_status()
        return answer.json()

    ns = f"/api/v1/namespaces/{namespace}"
    create("/api/v1/namespaces/kube-system/configmaps", _configmap("kube-system", "coredns"))
    create("/api/v1/namespaces/kube-system/pods", _bare_pod("coredns-probe"))
    create(
        f"{ns}/configmaps",
        _configmap(namespace, "podsweeper-evidence-train", {facts.EVIDENCE_LABEL: "train"}),
    )
    mpi = create(
        f"/apis/kubeflow.org/v1/namespaces/{namespace}/mpijobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "MPIJob",
            "metadata": {"name": "mpi"},
            "spec": {
                "runPolicy": {"backoffLimit": 3},
                "mpiReplicaSpecs": {
                    "Launcher": {
                        "replicas": 1,
                        "template": {"spec": {"containers": [{"name": "mpi", "image": "trainer:1"}]}},
                    }
                },
            },
        },
    )
    train = create(
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "train", "labels": {"team": "a"}},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "trainer:1"}},
        },
    )
    create(
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "held"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": True},
        },
    )
    marks = {facts.JOBSET_NAME_LABEL: "train", facts.TRAINER_MARK_LABEL: "trainer"}
    batch = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    create(batch, _plain_job("plain"))
    create(batch, _plain_job("named-only", {facts.JOBSET_NAME_LABEL: "train"}))
    create(batch, _plain_job("train-node-0", marks))
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    create(jobsets, _jobset("plain"))
    create(
        jobsets,
        _jobset(
            "owned",
            owner={
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "name": "train",
                "uid": train["metadata"]["uid"],
                "controller": True,
            },
        ),
    )
    create(jobsets, _jobset("marked", template_labels={facts.TRAINER_MARK_LABEL: "trainer"}))
    create(f"{ns}/pods", _bare_pod("app"))
    create(f"{ns}/pods", _bare_pod("worker", {facts.JOB_NAME_LABEL: "mpi"}))
    # Finished TrainJobs (status written as Trainer would): one rule expired-trainjob may delete,
    # one suspended, one owned by another object (neither of which it ever deletes).
    trainjobs = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs"
    evidence = admin.get(f"{url}{ns}/configmaps/podsweeper-evidence-train").json()
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "podsweeper-evidence-train"}
    for name, suspend, owners in (
        ("done", False, []),
        ("done-held", True, []),
        ("done-owned", False, [{**owner, "uid": evidence["metadata"]["uid"]}]),
    ):
        body = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name, **({"ownerReferences": owners} if owners else {})},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, **({"suspend": True} if suspend else {})},
        }
        made = create(trainjobs, body)
        made["status"] = {"conditions": [_finished_condition()]}
        answer = admin.put(f"{url}{trainjobs}/{name}/status", json=made)
        answer.raise_for_status()
    return {"mpi": mpi["metadata"]["uid"], "train": train["metadata"]["uid"]}


def _finished_condition() -> dict:
    return {
        "type": "Complete",
        "status": "True",
        "reason": "JobsCompleted",
        "message": "done",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def _cases(
    admin: requests.Session, url: str, namespace: str, uids: dict[str, str]
) -> tuple[list[Write], list[Write]]:
    """(refused, allowed): what podsweeper never does, and what it does."""
    ns = f"/api/v1/namespaces/{namespace}"
    mpi = f"/apis/kubeflow.org/v1/namespaces/{namespace}/mpijobs/mpi"
    train = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/train"
    batch = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    coredns = admin.get(f"{url}/api/v1/namespaces/kube-system/configmaps/coredns").json()
    coredns["data"] = {"Corefile": ". { forward . 203.0.113.1 }"}
    evidence = admin.get(f"{url}{ns}/configmaps/podsweeper-evidence-train").json()
    evidence["data"] = {"evidence.json": "[]"}
    labelled = {facts.EVIDENCE_LABEL: "train"}

    def post(what, resource, path, body):
        return Write(
            what, "create", "", resource, path.split("/")[4], "POST", path, {"params": DRY, "json": body}
        )

    def merge(what, group, resource, path, patch):
        return Write(
            what,
            "patch",
            group,
            resource,
            namespace,
            "PATCH",
            path,
            {"params": DRY, "data": json.dumps(patch), "headers": MERGE},
        )

    def delete(what, group, resource, path, where=namespace):
        return Write(what, "delete", group, resource, where, "DELETE", path, {"params": DRY})

    refused = [
        Write(
            "update kube-system/coredns",
            "update",
            "",
            "configmaps",
            "kube-system",
            "PUT",
            "/api/v1/namespaces/kube-system/configmaps/coredns",
            {"params": DRY, "json": coredns},
        ),
        post(
            "create a ConfigMap not named podsweeper-*",
            "configmaps",
            f"{ns}/configmaps",
            _configmap(namespace, "app-config", labelled),
        ),
        post(
            "create podsweeper-evidence-* without its label",
            "configmaps",
            f"{ns}/configmaps",
            _configmap(namespace, "podsweeper-evidence-x"),
        ),
        post(
            "create podsweeper's own ConfigMap in kube-system",
            "configmaps",
            "/api/v1/namespaces/kube-system/configmaps",
            _configmap("kube-system", "podsweeper-evidence-x", labelled),
        ),
        post(
            "create podsweeper's own ConfigMap in its own namespace",
            "configmaps",
            "/api/v1/namespaces/podsweeper/configmaps",
            _configmap("podsweeper", "podsweeper-evidence-x", labelled),
        ),
        Write(
            "patch an MPIJob's image",
            "patch",
            "kubeflow.org",
            "mpijobs",
            namespace,
            "PATCH",
            mpi,
            {
                "params": DRY,
                "data": json.dumps(
                    [
                        {
                            "op": "replace",
                            "path": "/spec/mpiReplicaSpecs/Launcher/template/spec/containers/0/image",
                            "value": "evil:1",
                        }
                    ]
                ),
                "headers": JSON_PATCH,
            },
        ),
        merge(
            "suspend an MPIJob and raise its backoffLimit",
            "kubeflow.org",
            "mpijobs",
            mpi,
            {"spec": {"runPolicy": {"suspend": True, "backoffLimit": 100}}},
        ),
        merge(
            "change a TrainJob's labels",
            "trainer.kubeflow.org",
            "trainjobs",
            train,
            {"metadata": {"labels": {"team": "b"}}},
        ),
        merge(
            "give a TrainJob an owner (the garbage collector would delete it)",
            "trainer.kubeflow.org",
            "trainjobs",
            train,
            {
                "metadata": {
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "name": "x",
                            "uid": "00000000-0000-0000-0000-000000000000",
                        }
                    ]
                }
            },
        ),
        merge(
            "resume a suspended TrainJob (suspend false)",
            "trainer.kubeflow.org",
            "trainjobs",
            f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/held",
            {"spec": {"suspend": False}},
        ),
        delete("delete a plain batch Job", "batch", "jobs", f"{batch}/plain"),
        delete(
            "delete a batch Job named for a JobSet but without Trainer's mark",
            "batch",
            "jobs",
            f"{batch}/named-only",
        ),
        delete("delete a JobSet no TrainJob made", "jobset.x-k8s.io", "jobsets", f"{jobsets}/plain"),
        delete("delete a pod of no training job", "", "pods", f"{ns}/pods/app"),
        delete(
            "delete a kube-system pod",
            "",
            "pods",
            "/api/v1/namespaces/kube-system/pods/coredns-probe",
            "kube-system",
        ),
        delete(
            "delete a running TrainJob",
            "trainer.kubeflow.org",
            "trainjobs",
            f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/train",
        ),
        delete(
            "delete a finished TrainJob that is suspended",
            "trainer.kubeflow.org",
            "trainjobs",
            f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/done-held",
        ),
        delete(
            "delete a finished TrainJob another object owns",
            "trainer.kubeflow.org",
            "trainjobs",
            f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/done-owned",
        ),
        post(
            "create podsweeper-retained-* without its label",
            "configmaps",
            f"{ns}/configmaps",
            _configmap(namespace, "podsweeper-retained-x"),
        ),
        post(
            "record an Event about a Pod",
            "events",
            f"{ns}/events",
            _event(namespace, "about-a-pod", "v1", "Pod"),
        ),
    ]
    allowed = [
        post(
            "create podsweeper-evidence-<job> with its label",
            "configmaps",
            f"{ns}/configmaps",
            _configmap(namespace, "podsweeper-evidence-other", labelled),
        ),
        post(
            "create podsweeper-finished-<job> with its label",
            "configmaps",
            f"{ns}/configmaps",
            _configmap(namespace, "podsweeper-finished-train", {facts.FINISH_MARK_LABEL: "train"}),
        ),
        Write(
            "replace podsweeper-evidence-<job>",
            "update",
            "",
            "configmaps",
            namespace,
            "PUT",
            f"{ns}/configmaps/podsweeper-evidence-train",
            {"params": DRY, "json": evidence},
        ),
        merge(
            "suspend an MPIJob (spec.runPolicy.suspend, uid precondition)",
            "kubeflow.org",
            "mpijobs",
            mpi,
            {"metadata": {"uid": uids["mpi"]}, "spec": {"runPolicy": {"suspend": True}}},
        ),
        merge(
            "suspend a TrainJob (spec.suspend, uid precondition)",
            "trainer.kubeflow.org",
            "trainjobs",
            train,
            {"metadata": {"uid": uids["train"]}, "spec": {"suspend": True}},
        ),
        delete(
            "delete a finished TrainJob (rule expired-trainjob, its overlay's RBAC)",
            "trainer.kubeflow.org",
            "trainjobs",
            f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/done",
        ),
        post(
            "create podsweeper-retained-<uid> with its label",
            "configmaps",
            f"{ns}/configmaps",
            _configmap(namespace, "podsweeper-retained-0000", {"podsweeper.dev/retained-evidence": "true"}),
        ),
        delete("delete a JobSet's batch Job made for a TrainJob", "batch", "jobs", f"{batch}/train-node-0"),
        delete("delete a JobSet a TrainJob controls", "jobset.x-k8s.io", "jobsets", f"{jobsets}/owned"),
        delete("delete a JobSet with Trainer's mark", "jobset.x-k8s.io", "jobsets", f"{jobsets}/marked"),
        delete("delete a training job's pod", "", "pods", f"{ns}/pods/worker"),
        post(
            "record an Event about a PyTorchJob",
            "events",
            f"{ns}/events",
            _event(namespace, "about-a-job", "kubeflow.org/v1", "PyTorchJob"),
        ),
        post(
            "record an Event about a Namespace",
            "events",
            f"{ns}/events",
            _event(namespace, "about-a-ns", "v1", "Namespace"),
        ),
    ]
    return refused, allowed


def _denied_by_policy(answer: requests.Response) -> bool:
    return answer.status_code == 403 and f"ValidatingAdmissionPolicy '{POLICY}'" in answer.json().get(
        "message", ""
    )


def test_the_admission_policy_refuses_what_rbac_allows_but_podsweeper_never_does(control_plane, namespace):
    admin, function = session(control_plane, "admin"), session(control_plane, "function")
    url = control_plane.url
    uids = _writes_world(admin, url, namespace)
    refused, allowed = _cases(admin, url, namespace, uids)
    probe = Prober(control_plane)
    # The TrainJob deletes need the verb only rule expired-trainjob's overlay grants.
    overlay = _granted(control_plane, "knative/overlays/trainjob-ttl/trainjobs-rbac.yaml")
    try:
        _judge_writes(control_plane, admin, function, probe, refused, allowed)
    finally:
        overlay()


def _granted(control_plane, manifest: str):
    """Apply an overlay's ClusterRole(+Binding) as admin until the returned call removes it."""
    import yaml
    from kubernetes import client

    admin_api = control_plane.api_client("admin")
    role, binding = [d for d in yaml.safe_load_all((ROOT / manifest).read_text()) if d]
    rbac = client.RbacAuthorizationV1Api(admin_api)
    rbac.create_cluster_role(role)
    rbac.create_cluster_role_binding(binding)
    probe = Prober(control_plane)
    deadline = time.monotonic() + 10
    while not probe.review("delete", "trainer.kubeflow.org", "trainjobs", "team-a"):
        assert time.monotonic() < deadline, f"{manifest}: its grant never showed"
        time.sleep(0.05)

    def remove() -> None:
        rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        rbac.delete_cluster_role(role["metadata"]["name"])

    return remove


def _judge_writes(control_plane, admin, function, probe, refused, allowed) -> None:
    url = control_plane.url
    # The policy is there from the control plane's start; its informer may still be syncing.
    first = refused[0]
    deadline = time.monotonic() + POLICY_SYNC_SECONDS
    while not _denied_by_policy(function.request(first.method, f"{url}{first.path}", timeout=10, **first.kw)):
        assert time.monotonic() < deadline, f"{first.what}: never refused by {POLICY}"
        time.sleep(0.2)
    problems = []
    for write in refused + allowed:
        # RBAC lets each one through: only the policy can tell them apart.
        if not probe.review(write.verb, write.group, write.resource, write.namespace):
            problems.append(f"{write.what}: RBAC refuses it already, the case tests nothing")
            continue
        answer = function.request(write.method, f"{url}{write.path}", timeout=10, **write.kw)
        if write in refused and not _denied_by_policy(answer):
            problems.append(
                f"{write.what}: not refused by {POLICY} ({answer.status_code} {answer.text[:300]})"
            )
        if write in allowed and not 200 <= answer.status_code < 300:
            problems.append(f"{write.what}: refused ({answer.status_code} {answer.text[:300]})")
        # The same request as admin: the policy binds to the function's user only.
        if write in refused:
            as_admin = admin.request(write.method, f"{url}{write.path}", timeout=10, **write.kw)
            if not 200 <= as_admin.status_code < 300:
                problems.append(
                    f"{write.what}: refused for admin too ({as_admin.status_code} {as_admin.text[:200]})"
                )
    assert not problems, "\n".join(problems)
    figures.add("security: writes the admission policy refuses the function", len(refused))
    figures.add("security: writes the admission policy lets the function make", len(allowed))


# -- Pod Security: the namespace enforces restricted, and the function's pod passes it ------------


def _function_pods() -> dict[str, dict]:
    """The function's pod, as each install's template makes it (Deployment; Knative Service,
    whose user container Knative runs unchanged next to its own restricted queue-proxy)."""
    import yaml

    deployment = yaml.safe_load((ROOT / "knative" / "deployment" / "deployment.yaml").read_text())
    service = yaml.safe_load((ROOT / "knative" / "service" / "service.yaml").read_text())
    pods = {}
    for name, template in (
        ("deployment", deployment["spec"]["template"]),
        ("knative", service["spec"]["template"]),
    ):
        spec = {
            k: v for k, v in template["spec"].items() if k not in ("containerConcurrency", "timeoutSeconds")
        }
        for container in spec["containers"]:
            for probe in ("readinessProbe", "livenessProbe"):
                container[probe]["httpGet"].setdefault("port", 8080)  # Knative fills it in
        pods[name] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"podsweeper-{name}", "labels": template["metadata"]["labels"]},
            "spec": spec,
        }
    return pods


def test_the_podsweeper_namespace_enforces_restricted_and_the_function_pod_passes_it(control_plane):
    admin = session(control_plane, "admin")
    url = control_plane.url
    labels = admin.get(f"{url}/api/v1/namespaces/podsweeper").json()["metadata"].get("labels") or {}
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted", labels
    path = f"{url}/api/v1/namespaces/podsweeper/pods"
    for name, template_pod in _function_pods().items():
        answer = admin.post(path, params=DRY, json=template_pod)
        assert answer.status_code == 201, f"{name}: {answer.status_code} {answer.text[:500]}"
        # The control: the same pod less one restricted setting is refused by Pod Security.
        weaker = json.loads(json.dumps(template_pod))
        weaker["spec"]["containers"][0]["securityContext"].pop("seccompProfile")
        answer = admin.post(path, params=DRY, json=weaker)
        assert answer.status_code == 403 and "violates PodSecurity" in answer.text, (name, answer.text[:300])


def test_the_record_key_is_the_one_secret_the_function_may_read_and_only_in_its_own_namespace(
    control_plane, admin_api, namespace
):
    """The Role beside the ClusterRole: the key finish records are signed with, read by name and
    made on first use in podsweeper's namespace; no other Secret there, no Secret elsewhere, no
    listing (which would show every Secret's value)."""
    admin = session(control_plane, "admin")
    url = control_plane.url
    for ns in ("podsweeper", namespace):
        admin.post(
            f"{url}/api/v1/namespaces/{ns}/secrets",
            json={"metadata": {"name": "other"}, "stringData": {"k": SECRET}},
        ).raise_for_status()
    probe = Prober(control_plane)
    own = "/api/v1/namespaces/podsweeper/secrets"
    key = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "podsweeper-record-key"}, "data": {}}
    existing = admin.get(f"{url}{own}/podsweeper-record-key")
    if existing.status_code == 200:  # made by an earlier test's function: put back after
        admin.delete(f"{url}{own}/podsweeper-record-key").raise_for_status()
    try:
        _probe_the_record_key(probe, own, key, namespace)
    finally:
        admin.delete(f"{url}{own}/podsweeper-record-key")
        admin.delete(f"{url}{own}/other").raise_for_status()
        if existing.status_code == 200:
            kept = existing.json()
            body = {"metadata": {"name": "podsweeper-record-key"}, "data": kept.get("data") or {}}
            admin.post(f"{url}{own}", json=body).raise_for_status()


def _probe_the_record_key(probe: Prober, own: str, key: dict, namespace: str) -> None:
    assert probe.ask("create", "POST", own, json=key)
    assert probe.ask("get", "GET", f"{own}/podsweeper-record-key")
    for verb, method, path in (
        ("get", "GET", f"{own}/other"),
        ("list", "GET", own),
        ("update", "PUT", f"{own}/podsweeper-record-key"),
        ("delete", "DELETE", f"{own}/podsweeper-record-key"),
        ("get", "GET", f"/api/v1/namespaces/{namespace}/secrets/podsweeper-record-key"),
        ("create", "POST", f"/api/v1/namespaces/{namespace}/secrets"),
    ):
        kw = (
            {"json": {**key, "metadata": {"name": "podsweeper-record-key"}}}
            if method in ("PUT", "POST")
            else {}
        )
        assert not probe.ask(verb, method, path, **kw), f"{method} {path} allowed"
    assert probe.problems == []
