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
from tests.support.harness.served import ALL_LOGS, Served, binary_headers, unreachable_kubeconfig
from tests.support.k8s import Operator

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
    operator = Operator(admin_api, namespace)
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


def looping_pod(operator: Operator, name: str) -> dict:
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


def decision_lines(text: str) -> int:
    count = 0
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            count += isinstance(item, dict) and item.get("msg") == "decision"
    return count


def test_no_served_function_of_this_run_logged_an_env_value():
    """Every server the reliability suite started (fuzz, faults, ...) wrote its log to a file.

    Runs after the tests that serve the function (it fails when run alone): with no log, or
    no decision line in any log, there would be nothing to check."""
    assert ALL_LOGS, "no served function wrote a log in this run: nothing to check (run the suite)"
    missing = [str(path) for path in ALL_LOGS if not path.exists()]
    assert not missing, f"server logs gone before they were checked: {missing}"
    lines = decisions = 0
    for path in ALL_LOGS:
        text = path.read_text(errors="replace")
        assert_no_secret(text, str(path))
        lines += text.count("\n")
        decisions += decision_lines(text)
    assert decisions > 0, f"{len(ALL_LOGS)} server logs, {lines} lines, and not one decision line to check"
    figures.add("security: server logs checked for env values", len(ALL_LOGS))
    figures.add("security: server log lines checked for env values", lines)
    figures.add("security: decision lines checked for env values", decisions)


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
    {*facts.FUNCTION_RBAC, *facts.SOURCE_RBAC, *facts.SUSPEND_RBAC, *facts.NODES_RBAC}
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
        # Across all namespaces too (a ClusterRoleBinding: the rule reads nodes, patches jobs anywhere).
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
