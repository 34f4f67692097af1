"""The package's tables against the test side's literal facts (tests/fixtures/facts.py).

The tests build their objects and their permission expectations from the facts, never from
podsweeper.kinds; this is the one place the two meet. Each field is its own check, so a change
to either side (a replica key, a plural, a version, a label, a new kind or link) fails here by
name: whoever makes it decides which side was right, and changes the other by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from podsweeper import kinds, model, ownership
from podsweeper.cluster.kube import records, writes
from tests.fixtures import builders, facts


def differs(what: str, package, literal) -> str:
    return f"{what}: podsweeper says {package!r}, tests/fixtures/facts.py says {literal!r}"


def check(what: str, package, literal) -> None:
    assert package == literal, differs(what, package, literal)


# -- the kinds -------------------------------------------------------------------------------


def test_the_same_training_kinds_in_the_same_order():
    # The order matters: the ApiServerSource lists the kinds in it (the overlays patch by
    # position), and the tests name them in it.
    check("TRAINING_KINDS", [k.kind for k in kinds.TRAINING_KINDS], [k.kind for k in facts.TRAINING_KINDS])
    check("OPERATOR_KINDS", [k.kind for k in kinds.OPERATOR_KINDS], [k.kind for k in facts.OPERATOR_KINDS])
    check("TRAINJOB", kinds.TRAINJOB.kind, facts.TRAINJOB.kind)
    check("BY_KIND", sorted(kinds.BY_KIND), sorted(facts.BY_KIND))


# (package attribute, facts attribute) compared for every kind.
KIND_FIELDS = (
    ("group", "group"),
    ("versions", "versions"),
    ("preferred_version", None),
    ("plural", "plural"),
    ("replica_specs_key", "replica_specs_key"),
    ("top_level_clean_pod_policy", "top_level_clean_pod_policy"),
    ("finished_conditions", "finished"),
    ("suspend_path", "suspend_path"),
    ("managed_by", "managed_by"),
)


@pytest.mark.parametrize("field", [package for package, _ in KIND_FIELDS])
@pytest.mark.parametrize("name", [k.kind for k in facts.TRAINING_KINDS])
def test_each_kind_field(name, field):
    package = kinds.BY_KIND.get(name)
    assert package is not None, f"{name}: in tests/fixtures/facts.py, not in podsweeper.kinds"
    literal = facts.BY_KIND[name]
    wanted = dict(KIND_FIELDS)[field]
    expected = literal.versions[0] if wanted is None else getattr(literal, wanted)
    check(f"{name}.{field}", getattr(package, field), expected)
    if field == "versions":
        for version in literal.versions:
            api_version = f"{literal.group}/{version}"
            check(f"{name}.api_version({version!r})", package.api_version(version), api_version)
            check(f"lookup({api_version!r}, {name!r})", kinds.lookup(api_version, name), package)


@pytest.mark.parametrize("name", [k.kind for k in facts.OPERATOR_KINDS])
def test_each_operator_kind_labels_and_defaults(name):
    """The fields only the training operator's kinds have (TrainJob has no replica specs and
    no operator-name label)."""
    package, literal = kinds.BY_KIND[name], facts.BY_KIND[name]
    check(f"{name}.operator_name", package.operator_name, literal.operator_name)
    check(f"{name}.default_restart_policy", package.default_restart_policy, literal.default_restart_policy)
    check(f"{name}.chain", package.chain, None)
    check(
        f"BY_OPERATOR_NAME[{literal.operator_name!r}]",
        kinds.BY_OPERATOR_NAME.get(literal.operator_name),
        package,
    )


def test_no_kind_lookup_beyond_the_facts():
    """Versions the facts do not list are not the package's either."""
    for literal in facts.TRAINING_KINDS:
        for version in ("v1", "v1alpha1", "v1beta1", "v2beta1", "v2"):
            if version not in literal.versions:
                api_version = f"{literal.group}/{version}"
                check(
                    f"lookup({api_version!r}, {literal.kind!r})",
                    kinds.lookup(api_version, literal.kind),
                    None,
                )
    check("lookup of another group's PyTorchJob", kinds.lookup("example.com/v1", "PyTorchJob"), None)


def test_operator_names():
    names = {k.operator_name: k.kind for k in facts.OPERATOR_KINDS} | {facts.MPI_OPERATOR_NAME: "MPIJob"}
    check("BY_OPERATOR_NAME", {n: k.kind for n, k in kinds.BY_OPERATOR_NAME.items()}, names)


# -- the chain and the launcher ------------------------------------------------------------------


LINK_FIELDS = (("kind", "kind"), ("group", "group"), ("version", "version"), ("plural", "plural"))


LINKS_AND_COMPANIONS = [("LINKS", i, link) for i, link in enumerate(facts.LINKS)] + [
    ("COMPANIONS", i, link) for i, link in enumerate(facts.COMPANIONS)
]


@pytest.mark.parametrize(
    "table, index, literal", LINKS_AND_COMPANIONS, ids=lambda x: getattr(x, "kind", None)
)
def test_each_link(table, index, literal):
    listed = getattr(facts, table)
    check(table, [link.kind for link in getattr(kinds, table)], [link.kind for link in listed])
    package = getattr(kinds, table)[index]
    for field, wanted in LINK_FIELDS:
        check(f"{literal.kind}.{field}", getattr(package, field), getattr(literal, wanted))
    check(f"{literal.kind}.finished_conditions", package.finished_conditions, literal.finished)
    check(f"{literal.kind}.api_version", package.api_version, f"{literal.group}/{literal.version}")
    check(f"INTERMEDIATE_BY_KIND[{literal.kind!r}]", kinds.INTERMEDIATE_BY_KIND.get(literal.kind), package)
    check(
        f"intermediate_lookup({package.api_version!r}, {literal.kind!r})",
        kinds.intermediate_lookup(package.api_version, literal.kind),
        package,
    )


def test_named_links():
    check("JOBSET.kind", kinds.JOBSET.kind, facts.JOBSET.kind)
    check("BATCH_JOB.kind", kinds.BATCH_JOB.kind, facts.BATCH_JOB.kind)


def test_trainjobs_chain():
    chain = kinds.TRAINJOB.chain
    assert chain is not None, "podsweeper.kinds: TrainJob has no chain"
    check("TrainJob chain", [link.kind for link in chain.links], [link.kind for link in facts.TRAINER_CHAIN])
    check("TrainJob chain", chain, kinds.TRAINER_CHAIN)
    check("TRAINER_CHAIN.name_label", chain.name_label, facts.JOBSET_NAME_LABEL)
    check("TRAINER_CHAIN.uid_label", chain.uid_label, facts.JOBSET_UID_LABEL)
    check("TRAINER_CHAIN.marker_label", chain.marker_label, facts.TRAINER_MARK_LABEL)
    check("chained kinds", [k.kind for k in kinds.TRAINING_KINDS if k.chain], ["TrainJob"])


def test_the_mpi_launcher():
    check("kinds with a launcher", [k.kind for k in kinds.TRAINING_KINDS if k.launcher], ["MPIJob"])
    launcher = kinds.BY_KIND["MPIJob"].launcher
    check("MPI_LAUNCHER", launcher, kinds.MPI_LAUNCHER)
    check("MPI_LAUNCHER.link", launcher.link.kind, facts.BATCH_JOB.kind)
    check("MPI_LAUNCHER.suffix", launcher.suffix, facts.MPI_LAUNCHER_SUFFIX)
    check("MPI_LAUNCHER.operator_name", launcher.operator_name, facts.MPI_OPERATOR_NAME)
    check("MPI_LAUNCHER.versions", launcher.versions, facts.MPI_LAUNCHER_VERSIONS)
    check("MPI_LAUNCHER.managed_by", launcher.managed_by, facts.MPI_OPERATOR_MANAGED_BY)


# -- labels and marks ----------------------------------------------------------------------------


LABELS = [
    ("kinds.GROUP", kinds.GROUP, facts.KUBEFLOW_GROUP),
    ("kinds.TRAINER_GROUP", kinds.TRAINER_GROUP, facts.TRAINER_GROUP),
    ("ownership.JOB_NAME_LABEL", ownership.JOB_NAME_LABEL, facts.JOB_NAME_LABEL),
    ("ownership.OPERATOR_NAME_LABEL", ownership.OPERATOR_NAME_LABEL, facts.OPERATOR_NAME_LABEL),
    ("ownership.LEGACY_JOB_NAME_LABEL", ownership.LEGACY_JOB_NAME_LABEL, facts.LEGACY_JOB_NAME_LABEL),
    ("ownership.LEGACY_GROUP_LABEL", ownership.LEGACY_GROUP_LABEL, facts.LEGACY_GROUP_LABEL),
    (
        "ownership.TRAINING_POD_SELECTORS",
        ownership.TRAINING_POD_SELECTORS,
        ("training.kubeflow.org/job-name", "group-name=kubeflow.org,job-name"),
    ),
    ("ownership.CHAIN_POD_SELECTORS", ownership.CHAIN_POD_SELECTORS, ("jobset.sigs.k8s.io/jobset-name",)),
    ("kinds.KUEUE_QUEUE_LABEL", kinds.KUEUE_QUEUE_LABEL, facts.KUEUE_QUEUE_LABEL),
    (
        "kinds.TRAINING_OPERATOR_MANAGED_BY",
        kinds.TRAINING_OPERATOR_MANAGED_BY,
        facts.TRAINING_OPERATOR_MANAGED_BY,
    ),
    ("kinds.MPI_OPERATOR_MANAGED_BY", kinds.MPI_OPERATOR_MANAGED_BY, facts.MPI_OPERATOR_MANAGED_BY),
    ("kinds.TRAINER_MANAGED_BY", kinds.TRAINER_MANAGED_BY, facts.TRAINER_MANAGED_BY),
    ("model.SKIP_ANNOTATION", model.SKIP_ANNOTATION, facts.SKIP_ANNOTATION),
    ("kube.records.EVIDENCE_LABEL", records.EVIDENCE_LABEL, facts.EVIDENCE_LABEL),
    ("kube.records.FINISH_MARK_LABEL", records.FINISH_MARK_LABEL, facts.FINISH_MARK_LABEL),
    ("kube.writes.PROGRESS_ANNOTATION", writes.PROGRESS_ANNOTATION, facts.PROGRESS_ANNOTATION),
]


@pytest.mark.parametrize("what, package, literal", LABELS, ids=[what for what, _, _ in LABELS])
def test_label_and_mark(what, package, literal):
    check(what, package, literal)


# -- the facts themselves ------------------------------------------------------------------------


def test_the_facts_agree_with_themselves():
    """The derived tables of facts.py say what its kinds say (they are typed out twice)."""
    check(
        "facts.PLURALS",
        facts.PLURALS,
        {k.kind: k.plural for k in (*facts.TRAINING_KINDS, *facts.LINKS, *facts.COMPANIONS)}
        | {"Pod": "pods"},
    )
    check(
        "facts.REPLICA_KEYS", facts.REPLICA_KEYS, {k.kind: k.replica_specs_key for k in facts.TRAINING_KINDS}
    )
    assert builders.PLURALS is facts.PLURALS and builders.REPLICA_KEYS is facts.REPLICA_KEYS
    granted = {plural for (group, plural) in facts.FUNCTION_RBAC if group == facts.KUBEFLOW_GROUP}
    check("facts.FUNCTION_RBAC's kubeflow.org resources", granted, {k.plural for k in facts.OPERATOR_KINDS})
    assert set(facts.SUSPEND_RBAC) == {(k.group, k.plural) for k in facts.OPERATOR_KINDS}
    for table in (facts.FUNCTION_RBAC, facts.SOURCE_RBAC, facts.SUSPEND_RBAC, facts.NODES_RBAC):
        for key, verbs in table.items():
            assert verbs <= set(facts.VERBS), (key, verbs)


def test_the_test_side_imports_no_package_tables():
    """The builders, generators and oracle read facts.py, never podsweeper (a fresh interpreter:
    this one has imported the package above)."""
    import subprocess
    import sys

    modules = (
        "tests.fixtures.facts",
        "tests.fixtures.builders",
        "tests.fixtures.trainer",
        "tests.fixtures.mpi",
        "tests.fixtures.scenarios",
        "tests.apiserver.fuzz",
        "tests.replay.oracle",
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m == 'podsweeper' or m.startswith('podsweeper.')))\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"the test side's generators import the package: {result.stdout}"
