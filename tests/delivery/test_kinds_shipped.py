"""What ships grants and watches every kind of function/podsweeper/kinds.py, and nothing more.

The kind table is the one home of a kind; the manifests and the chart are written by hand
(their comments are what an operator reads), so instead of being generated they are held equal
to the table here. For every install (each case of test_helm.CASES: the kustomize directories
`kubectl apply -k` takes in turn, and the chart with the values that stand for them), the
expectations are derived from `podsweeper.kinds`:

- the function's ClusterRole reads (get, list) every training kind, every chain link and
  companion (Volcano's PodGroup), and deletes the links only; the source's reads and watches
  (get, list, watch) the kinds and links, never a companion; the opt-in
  suspend role patches exactly the kinds whose pods the training operator labels;
- the ApiServerSource watches each kind its install selects, at the version it selects, each
  link of a selected kind's chain, and the pods, by the label that makes a pod a job's;
- the chart's `watch.*` values offer exactly the versions a many-version kind is served at.

A kind added to kinds.py and not to a manifest fails here, naming the install and the resource.
The literal tables of tests/fixtures/facts.py stay the other side (test_manifests.py): what
the manifests grant never widens because the package grew.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from podsweeper import kinds
from podsweeper.ownership import JOB_NAME_LABEL
from tests.delivery.test_helm import CASES, CHART, applied, chart, merged
from tests.delivery.test_manifests import rules_table

# Which chart value turns a kind's generation on (watch.<value>); the kustomize installs
# mean the same by the watch components they pick (knative/source/watch/).
GENERATION_SWITCH = {kinds.GROUP: "trainingOperator", kinds.TRAINER_GROUP: "trainerV2"}
# A kind served at more than one version (never two at once: the adapter exits on an unserved
# one) has a value of its own naming the version, or "none".
VERSION_SWITCH = {"MPIJob": "mpiJob"}
DEFAULT_WATCH: dict = yaml.safe_load((CHART / "values.yaml").read_text())["watch"]
TRAINING_GROUPS = {k.group for k in kinds.TRAINING_KINDS} | {
    x.group for x in (*kinds.LINKS, *kinds.COMPANIONS)
}

Watch = tuple[str, str, str | None]  # apiVersion, kind, the label its selector requires


def selected(watch: dict) -> dict[kinds.TrainingKind, str]:
    """The kinds an install with these watch values watches, each at its version."""
    chosen = {}
    for kind in kinds.TRAINING_KINDS:
        if len(kind.versions) > 1:
            assert kind.kind in VERSION_SWITCH, (
                f"{kind.kind} is served at {kind.versions}: which value picks one?"
            )
            version = watch[VERSION_SWITCH[kind.kind]]
            if version != "none":
                chosen[kind] = version
        else:
            assert kind.group in GENERATION_SWITCH, f"{kind.kind}: no watch value turns {kind.group} on"
            if watch[GENERATION_SWITCH[kind.group]]:
                chosen[kind] = kind.preferred_version
    return chosen


def expected_watches(watch: dict) -> list[Watch]:
    """What the ApiServerSource must list: the kinds, their chains' links (the top one whole, the
    ones below by the chain's name label) and the pods, by each label that makes a pod ours."""
    out: list[Watch] = []
    chosen = selected(watch)
    for kind, version in chosen.items():
        out.append((kind.api_version(version), kind.kind, None))
    if any(kind.chain is None for kind in chosen):
        out.append(("v1", "Pod", JOB_NAME_LABEL))
    for chain in dict.fromkeys(kind.chain for kind in chosen if kind.chain):
        top, *below = chain.links
        out.append((top.api_version, top.kind, None))
        out += [(link.api_version, link.kind, chain.name_label) for link in below]
        out.append(("v1", "Pod", chain.name_label))
    return sorted(out, key=str)


def listed_watches(source: dict) -> list[Watch]:
    out: list[Watch] = []
    for entry in source["spec"]["resources"]:
        selector = entry.get("selector")
        label = None
        if selector is not None:
            (expression,) = selector["matchExpressions"]
            assert expression["operator"] == "Exists" and set(selector) == {"matchExpressions"}, entry
            label = expression["key"]
        out.append((entry["apiVersion"], entry["kind"], label))
    return sorted(out, key=str)


def training_rules(role: dict) -> dict[tuple[str, str], set[str]]:
    """A ClusterRole's grants on the training kinds' and the links' groups."""
    return {key: verbs for key, verbs in rules_table(role).items() if key[0] in TRAINING_GROUPS}


def installs() -> list[tuple[str, str]]:
    return [(case, side) for case in CASES for side in ("kustomize", "chart")]


_RENDERS: dict[tuple[str, str], dict] = {}


def install(case: str, side: str) -> dict[tuple[str, str], dict]:
    """(kind, name) -> object, as the case's install leaves it on that side."""
    if (case, side) not in _RENDERS:
        objects = applied(CASES[case][1]) if side == "kustomize" else chart(CASES[case][0])
        _RENDERS[case, side] = {(o["kind"], o["metadata"]["name"]): o for o in objects.values()}
    return _RENDERS[case, side]


def watch_values(case: str) -> dict:
    return merged(DEFAULT_WATCH, CASES[case][0].get("watch", {}))


@pytest.mark.parametrize("case, side", installs())
def test_the_source_watches_every_selected_kind_its_links_and_pods(case, side):
    source = install(case, side)[("ApiServerSource", "podsweeper")]
    want, got = expected_watches(watch_values(case)), listed_watches(source)
    assert got == want, (
        f"{case} ({side}): not watched {sorted(set(want) - set(got), key=str)}, "
        f"watched beyond kinds.py {sorted(set(got) - set(want), key=str)}"
    )


@pytest.mark.parametrize("case, side", installs())
def test_the_roles_grant_every_kind_and_link_their_verbs(case, side):
    objects = install(case, side)
    function = training_rules(objects[("ClusterRole", "podsweeper")])
    source = training_rules(objects[("ClusterRole", "podsweeper-source")])
    everything = [(k.group, k.plural) for k in kinds.TRAINING_KINDS] + [
        (x.group, x.plural) for x in kinds.LINKS
    ]
    companions = [(x.group, x.plural) for x in kinds.COMPANIONS]
    assert set(function) == set(everything + companions), f"{case} ({side}): the function's ClusterRole"
    # A companion (a PodGroup) is read by name and listed by the sweep, never watched.
    assert set(source) == set(everything), f"{case} ({side}): the source's ClusterRole"
    for kind in kinds.TRAINING_KINDS:
        key = (kind.group, kind.plural)
        assert {"get", "list"} <= function[key] and "delete" not in function[key], (case, side, key)
        # Every generation's grants stay whatever is watched: a grant nobody serves is inert.
        assert source[key] == {"get", "list", "watch"}, (case, side, key)
    for link in kinds.COMPANIONS:  # read by name and listed, never written
        assert function[(link.group, link.plural)] == {"get", "list"}, (case, side, link.kind)
    for link in kinds.LINKS:
        key = (link.group, link.plural)
        assert function[key] == {"get", "list", "delete"}, (case, side, key)
        assert source[key] == {"get", "list", "watch"}, (case, side, key)
    suspend = objects.get(("ClusterRole", "podsweeper-suspend"))
    if CASES[case][0].get("crashLoopSuspend", {}).get("enabled"):
        assert suspend is not None, f"{case} ({side}): no suspend role"
        assert training_rules(suspend) == {(k.group, k.plural): {"patch"} for k in kinds.OPERATOR_KINDS}
    else:
        assert suspend is None, f"{case} ({side}): the suspend role is opt-in"


def test_every_version_of_every_kind_is_watched_by_some_install():
    watched = {(v[0], v[1]) for case in CASES for v in expected_watches(watch_values(case))}
    for kind in kinds.TRAINING_KINDS:
        for version in kind.versions:
            assert (kind.api_version(version), kind.kind) in watched, f"{kind.kind} {version}: no install"


def test_the_chart_offers_each_version_of_a_many_version_kind():
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["watch"]["properties"]
    for name, value in VERSION_SWITCH.items():
        kind = kinds.BY_KIND[name]
        assert schema[value]["enum"] == [*kind.versions, "none"], name
        assert DEFAULT_WATCH[value] == kind.preferred_version
    assert set(schema) == set(DEFAULT_WATCH)


def policy_expressions(policy: dict) -> dict[str, str]:
    """The policy's variables and validations by what they are about (variable name, message)."""
    spec = policy["spec"]
    return {
        **{v["name"]: " ".join(v["expression"].split()) for v in spec["variables"]},
        **{v["message"]: " ".join(v["expression"].split()) for v in spec["validations"]},
    }


@pytest.mark.parametrize("case, side", installs())
def test_the_admission_policy_judges_every_kinds_writes(case, side):
    """A kind the policy does not match is written unjudged (its suspend patch could change
    anything); a kind its Events clause does not name gets no Warning."""
    policy = install(case, side)[("ValidatingAdmissionPolicy", "podsweeper-function-writes")]
    updates = {
        (group, resource)
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        if rule["operations"] == ["UPDATE"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert updates == {(k.group, k.plural) for k in kinds.TRAINING_KINDS}, f"{case} ({side})"
    deletes = {
        (group, resource)
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        if rule["operations"] == ["DELETE"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    # Every object the function may delete besides pods is judged: the links, and a chained
    # job itself (rule expired-trainjob, opt-in: a finished TrainJob only).
    chained = {(k.group, k.plural) for k in kinds.TRAINING_KINDS if k.chain is not None}
    assert deletes - {("", "pods")} == {(x.group, x.plural) for x in kinds.LINKS} | chained, (
        f"{case} ({side}): the deletes judged"
    )
    expressions = policy_expressions(policy)
    (events,) = [e for m, e in expressions.items() if m.startswith("podsweeper writes Events")]
    named: dict[str, set[str]] = {}
    for clause in events.split("||"):
        group = re.search(r"apiVersion\.startsWith\('([^']+)/'\)", clause)
        if group is None:
            continue
        listed = re.search(r"kind in \[([^\]]*)\]", clause)
        names = re.findall(r"'([^']+)'", listed[1]) if listed else re.findall(r"kind == '([^']+)'", clause)
        named.setdefault(group[1], set()).update(names)
    assert named == {
        group: {k.kind for k in kinds.TRAINING_KINDS if k.group == group}
        for group in {k.group for k in kinds.TRAINING_KINDS}
    }, f"{case} ({side}): the kinds an Event may be about"
    (suspend,) = [e for m, e in expressions.items() if m.startswith("podsweeper may change a training job")]
    groups = re.search(r"request\.resource\.group in \[([^\]]*)\]", suspend)
    assert groups is not None and set(re.findall(r"'([^']+)'", groups[1])) == {
        k.group for k in kinds.TRAINING_KINDS
    }
    # Where the switch is: spec.suspend for the groups the policy names, else spec.runPolicy.suspend.
    spec_suspend = set(re.findall(r"request\.resource\.group == '([^']+)'", expressions["switchKey"]))
    for kind in kinds.TRAINING_KINDS:
        where = ("suspend",) if kind.group in spec_suspend else ("runPolicy", "suspend")
        assert kind.suspend_path == where, f"{case} ({side}): {kind.kind}'s switch"
