"""The opt-in overlays that give a rule its one extra power (knative/overlays/stuck-terminating:
`get` on nodes; knative/overlays/trainjob-ttl: `delete` on trainjobs): each grants exactly its
table to the function's ServiceAccount and nothing the base grants already, adds its setting and
changes nothing else, and the overlay docs/deploy.md shows for running it live renders.

What each power does against the real API server's authorizer is in its own file
(test_stuck_terminating_overlay.py, test_trainjob_ttl_overlay.py); the render, server-side
dry-run and Knative admission of every overlay are in test_manifests.py (KUSTOMIZATIONS).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass

import pytest
import yaml

from tests.delivery.test_manifests import KNATIVE, REPO, env_of, ksvc_container, one, rules_table

FUNCTION_SUBJECT = {"kind": "ServiceAccount", "name": "podsweeper", "namespace": "podsweeper"}


@dataclass(frozen=True)
class OptIn:
    overlay: str  # under knative/overlays/
    rbac: str  # its RBAC file's name there
    table: dict[tuple[str, str], set[str]]  # (group, resource) -> verbs it grants
    setting: str
    value: str  # what the overlay sets
    field: str  # the Settings field it becomes
    parsed: int
    section: str  # docs/deploy.md's heading for it

    @property
    def path(self):
        return KNATIVE / "overlays" / self.overlay

    @property
    def name(self) -> str:
        return f"podsweeper-{self.overlay}"

    def rbac_docs(self) -> list[dict]:
        return [d for d in yaml.safe_load_all((self.path / self.rbac).read_text()) if d]


OPT_INS = {
    "stuck-terminating": OptIn(
        "stuck-terminating",
        "nodes-rbac.yaml",
        {("", "nodes"): {"get"}},
        "PODSWEEPER_STUCK_TERMINATING_SECONDS",
        "300",
        "stuck_terminating_seconds",
        300,
        "## stuck-terminating (opt-in)",
    ),
    "trainjob-ttl": OptIn(
        "trainjob-ttl",
        "trainjobs-rbac.yaml",
        {("trainer.kubeflow.org", "trainjobs"): {"delete"}},
        "PODSWEEPER_TRAINJOB_TTL_SECONDS",
        "604800",  # 7 days
        "trainjob_ttl_seconds",
        7 * 24 * 3600,
        "## expired-trainjob (opt-in)",
    ),
}


def status_of(call, *args, **kwargs) -> int:
    """The HTTP status a kubernetes client call got (200 when it did not raise)."""
    from kubernetes.client.rest import ApiException

    try:
        call(*args, **kwargs)
    except ApiException as error:
        return error.status
    return 200


def wait_status(call, wanted: int, timeout: float = 10.0) -> int:
    """The authorizer learns RBAC changes from its informer: allow it a moment."""
    deadline = time.monotonic() + timeout
    while (status := status_of(call)) != wanted and time.monotonic() < deadline:
        time.sleep(0.1)
    return status


@pytest.fixture(scope="module")
def base():
    from tests.support.tools.kustomize import render

    return render(REPO / "knative")


@pytest.mark.parametrize("key", list(OPT_INS))
def test_overlay_grants_its_table_to_the_function_and_the_base_never_does(key):
    opt_in = OPT_INS[key]
    docs = opt_in.rbac_docs()
    role = one(docs, "ClusterRole")
    assert role["metadata"]["name"] == opt_in.name
    assert rules_table(role) == opt_in.table
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": opt_in.name,
    }
    assert binding["subjects"] == [FUNCTION_SUBJECT]
    # The rule is off by default, and so is its power: the base grants none of these verbs.
    base_role = one(
        [d for d in yaml.safe_load_all((KNATIVE / "function" / "rbac.yaml").read_text()) if d], "ClusterRole"
    )
    granted = rules_table(base_role)
    assert not [key for key, verbs in opt_in.table.items() if verbs & granted.get(key, set())]


@pytest.mark.parametrize("key", list(OPT_INS))
def test_overlay_adds_the_setting_and_changes_nothing_else(key, base, monkeypatch):
    from tests.support.tools.kustomize import render

    opt_in = OPT_INS[key]
    by_id = {(o["kind"], o["metadata"]["name"]): o for o in render(opt_in.path)}
    assert set(by_id) == {
        ("Service", "podsweeper"),
        ("ClusterRole", opt_in.name),
        ("ClusterRoleBinding", opt_in.name),
    }
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        assert by_id[(kind, opt_in.name)] == one(opt_in.rbac_docs(), kind)
    service = json.loads(json.dumps(by_id[("Service", "podsweeper")]))
    env = env_of(ksvc_container([service]))
    assert env[opt_in.setting] == opt_in.value
    container = service["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != opt_in.setting]
    assert service == one(base, "Service", "serving.knative.dev")
    assert env["PODSWEEPER_DRY_RUN"] == "true"  # still dry-run: overlays/live is separate

    from podsweeper.config import ENV_PREFIX, load_settings

    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert getattr(load_settings(), opt_in.field) == opt_in.parsed


@pytest.mark.parametrize("key", list(OPT_INS))
def test_documented_live_overlay_with_the_rule_renders(key, base, tmp_path):
    """docs/deploy.md's own overlay for running the rule for real (not dry-run), as written
    there: the base, a copy of the overlay's RBAC file, the two settings."""
    from tests.support.tools.kustomize import render

    opt_in = OPT_INS[key]
    section = (REPO / "docs" / "deploy.md").read_text().split(opt_in.section, 1)[1]
    (snippet,) = [b for b in re.findall(r"```yaml\n(.*?)```", section, re.S) if opt_in.rbac in b]
    overlay = tmp_path / "my-cluster" / "podsweeper"
    overlay.mkdir(parents=True)
    shutil.copy(opt_in.path / opt_in.rbac, overlay / opt_in.rbac)
    knative = os.path.relpath(KNATIVE, overlay)
    (overlay / "kustomization.yaml").write_text(snippet.replace("../../podsweeper/knative", knative))
    objects = render(overlay)
    ids = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ids == {(o["kind"], o["metadata"]["name"]) for o in base} | {
        ("ClusterRole", opt_in.name),
        ("ClusterRoleBinding", opt_in.name),
    }
    env = env_of(ksvc_container(objects))
    assert env["PODSWEEPER_DRY_RUN"] == "false" and env[opt_in.setting] == opt_in.value
