"""`podsweeper replay --html`: the page names every pod and rule, fetches nothing, escapes everything."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from podsweeper.cli import main
from podsweeper.config import Settings
from podsweeper.page import page
from podsweeper.page.build import build
from podsweeper.replay import replay
from tests.fixtures import scenarios
from tests.fixtures.builders import at, container_status, event, job, pod, set_conditions
from tests.fixtures.mpi import launcher_job, launcher_pod, mpijob, worker

FIXTURES = Path(scenarios.__file__).parent
SEED_2 = str(FIXTURES / "seed-experiment-2.jsonl")
HOSTILE = "<script>alert(1)</script>"


def pods_of(view) -> list:
    """A job view's pod rows (its rows[0] is the job's own)."""
    return [row for row in view.rows[1:] if row.kind == "Pod"]


def fixture_pods(path: str) -> set[str]:
    names = set()
    for line in Path(path).read_text().splitlines():
        data = json.loads(line).get("data") or {}
        if data.get("kind") == "Pod":
            names.add(data["metadata"]["name"])
    return names


class Tags(HTMLParser):
    """Every tag and attribute of a page, as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += [(name, value or "") for name, value in attrs]

    def handle_data(self, data):
        self.text.append(data)


def parsed(text: str) -> Tags:
    tags = Tags()
    tags.feed(text)
    tags.close()
    return tags


def assert_fetches_nothing(text: str) -> None:
    assert "http://" not in text and "https://" not in text
    tags = parsed(text)
    assert "script" not in tags.tags and "iframe" not in tags.tags and "img" not in tags.tags
    for name, value in tags.attributes:
        assert not name.startswith("on"), (name, value)
        if name in ("src", "href", "xlink:href", "action", "srcset"):
            assert value.startswith(("data:", "#")), (name, value)
    assert "@import" not in text and "url(" not in text.replace("url(#crash)", "")


def test_seed_experiment_2_page_names_every_pod_and_every_rule():
    run = replay([SEED_2], Settings(dry_run=False))
    text = page(run)
    visible = " ".join(parsed(text).text)
    pods = fixture_pods(SEED_2)
    assert len(pods) == 4
    for name in pods:
        assert name in visible, name
    rules = {a.decision.rule.value for s in run.steps for a in s.outcome.applied}
    assert rules == {"finished-job-active-pod", "no-backoff-limit"}
    for rule in rules:
        assert rule in visible, rule
    assert "PyTorchJob default/pytest" in visible
    assert_fetches_nothing(text)


def test_model_of_seed_experiment_2():
    model = build(replay([SEED_2], Settings(dry_run=False)))
    (pytest_job,) = model.jobs
    assert [s.label for s in pytest_job.rows[0].spans] == ["created", "running", "finished: Succeeded"]
    rows = {row.label: row for row in pods_of(pytest_job)}
    assert sorted(rows) == sorted(fixture_pods(SEED_2))
    worker = rows["pytest-worker-0"]
    assert worker.spans[-1].end is not None  # ended where podsweeper deleted it
    assert [m.label for m in worker.marks if m.kind == "restart"] == ["1"]
    # the recording goes on after the delete: restarts 2, 2, 4, shown as ignored
    assert [m.label for m in worker.marks if m.kind == "ignored"] == ["2", "2", "4"]
    assert rows["pytest-master-0"].spans[-1].end is None  # still there at the end
    assert [(d.action, d.result) for d in pytest_job.decisions] == [("warn", "warned")] + [
        ("delete", "deleted")
    ] * 3
    assert sorted(e.pod for e in pytest_job.evidence) == [f"default/pytest-worker-{i}" for i in range(3)]
    assert all(e.containers[0].exit_code == 1 for e in pytest_job.evidence)


def test_every_fixture_renders_without_fetches():
    paths = sorted(str(p) for p in FIXTURES.glob("*.jsonl"))
    for path in [*paths, *sorted(str(p) for p in (FIXTURES / "recorded").glob("*.jsonl"))]:
        text = page(replay([path], Settings(dry_run=False)))
        assert_fetches_nothing(text)
        for name in fixture_pods(path):
            assert name in text, (path, name)


def hostile_stream(tmp_path: Path) -> Path:
    j = job(name=HOSTILE, replicas={"Worker": 1})
    crashed = container_status(state="terminated", exit_code=1, reason='"><img src=x onerror=alert(2)>')
    worker = pod(j, "Worker", 0, phase="Running", containers=[crashed])
    events = [
        event("add", j, at(0)),
        event("add", worker, at(1)),
        event("update", set_conditions(j, [("Created", at(0)), ("Failed", at(20))]), at(20)),
    ]
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_hostile_names_are_escaped(tmp_path):
    run = replay([str(hostile_stream(tmp_path))], Settings(dry_run=False))
    deleted = [a.decision for s in run.steps for a in s.outcome.applied if a.result == "deleted"]
    assert [d.name for d in deleted] == [f"{HOSTILE}-worker-0"]  # the stream does reach a delete
    text = page(run)
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;-worker-0" in text
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in text
    visible = " ".join(parsed(text).text)
    assert f"{HOSTILE}-worker-0" in visible  # shown as text, not markup
    assert_fetches_nothing(text)


def test_cli_writes_the_page_and_still_prints(tmp_path, capsys):
    out = tmp_path / "replay.html"
    assert main(["replay", SEED_2, "--html", str(out)]) == 0
    printed = capsys.readouterr()
    assert "3 x delete (finished-job-active-pod)" in printed.out
    assert f"wrote {out}" in printed.err
    assert out.read_text(encoding="utf-8") == page(replay([SEED_2], Settings(dry_run=False)))


def test_cli_html_with_json_keeps_stdout_json(tmp_path, capsys):
    out = tmp_path / "replay.html"
    assert main(["replay", SEED_2, "--json", "--html", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(json.loads(line)["rule"] for line in lines)
    assert out.exists()


def test_cli_unwritable_html_is_exit_2(tmp_path, capsys):
    assert main(["replay", SEED_2, "--html", str(tmp_path / "missing-dir" / "x.html")]) == 2
    assert "podsweeper replay:" in capsys.readouterr().err


def test_job_states_suspended_by_podsweeper_then_watched_suspended_and_deleted(tmp_path):
    j = job(conditions=[("Created", at(0)), ("Running", at(2))])
    looping = pod(
        j,
        "Worker",
        0,
        phase="Running",
        containers=[container_status(state="waiting", reason="CrashLoopBackOff", restarts=6, last_exit=1)],
    )
    suspended = set_conditions(j, [("Created", at(0)), ("Suspended", at(90))])
    suspended["spec"]["runPolicy"]["suspend"] = True
    events = [
        event("add", j, at(0)),
        event("add", looping, at(60)),
        event("update", suspended, at(90)),
        event("delete", suspended, at(120)),
    ]
    path = tmp_path / "suspend.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    run = replay([str(path)], Settings(dry_run=False, crashloop_action="suspend"))
    (view,) = build(run).jobs
    # podsweeper suspends it at 60s (the watch confirms at 90s: same state), then it is deleted
    assert [(s.label, s.start) for s in view.rows[0].spans] == [
        ("created", at(0)),
        ("suspended", at(60)),
        ("deleted", at(120)),
    ]
    assert view.rows[0].spans[1].note == "suspended by podsweeper"
    assert [(d.action, d.result) for d in view.decisions if d.rule == "crash-loop"] == [
        ("suspend", "suspended")
    ]
    text = page(run)
    assert "decision-suspend" in text and "suspended by podsweeper" in text


# -- Trainer v2: a TrainJob's chain (TrainJob -> JobSet -> batch Job -> Pod), from the recordings

RECORDED = FIXTURES / "recorded"


class RowLabels(HTMLParser):
    """The text of every timeline row's label, in drawing order."""

    def __init__(self) -> None:
        super().__init__()
        self.labels: list[str] = []
        self._in = False

    def handle_starttag(self, tag, attrs):
        self._in = tag == "text" and "rowlabel" in (dict(attrs).get("class") or "").split()
        if self._in:
            self.labels.append("")

    def handle_endtag(self, tag):
        self._in = False

    def handle_data(self, data):
        if self._in:
            self.labels[-1] += data


def row_labels(text: str) -> list[str]:
    parser = RowLabels()
    parser.feed(text)
    parser.close()
    return parser.labels


def trainer_run(name: str, tmp_path: Path | None = None, edit=None):
    path = RECORDED / f"trainer-{name}.jsonl"
    if edit is not None:
        assert tmp_path is not None
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        edited = tmp_path / path.name
        edited.write_text("".join(json.dumps(edit(i, e)) + "\n" for i, e in enumerate(lines, start=1)))
        path = edited
    return replay([str(path)], Settings(dry_run=False))


def decision_marks(row) -> list[str]:
    return [m.kind for m in row.marks if m.kind.startswith("decision")]


def test_trainer_chain_has_jobset_and_job_rows_nested_under_the_trainjob():
    run = trainer_run("orphan-job")
    labels = row_labels(page(run))
    # old page: the TrainJob's row and its pods only
    assert labels[:3] == ["TrainJob", "JobSet clash (a2008996)", "Job clash-node-0"], labels
    (view,) = build(run).jobs
    assert [(r.kind, r.label, r.depth) for r in view.rows] == [
        ("TrainJob", "TrainJob", 0),
        ("JobSet", "JobSet clash (a2008996)", 1),  # deleted (propagation Orphan) at 32 s
        ("Job", "Job clash-node-0", 2),  # left without a controller: still drawn where it came from
        ("Pod", "clash-node-0-0-5dn58", 3),
        ("Pod", "clash-node-0-1-lwcfn", 3),
        ("JobSet", "JobSet clash (1b1e3e52)", 1),  # the one Trainer made again
    ]
    jobset, job_row = view.rows[1], view.rows[2]
    assert jobset.title == "JobSet trainer-orphan-job/clash uid a2008996-cfeb-43c9-aa62-6f2f0764a1c5"
    assert jobset.spans[-1].end is not None  # ended at its watched delete
    assert [m.title for m in jobset.marks if m.kind == "ended"] == ["deleted (watch event)"]
    assert (job_row.spans[-1].label, job_row.spans[-1].tone) == ("orphaned", "orphaned")
    assert "no controller" in job_row.spans[-1].note
    assert [s.label for s in view.rows[-1].spans] == ["created"]
    assert [r.label for r in pods_of(view)] == ["clash-node-0-0-5dn58", "clash-node-0-1-lwcfn"]


def test_trainer_decisions_are_marked_on_the_row_of_their_object():
    jobset_run, job_run = trainer_run("orphan-jobset"), trainer_run("orphan-job")
    (lost,) = build(jobset_run).jobs
    (clash,) = build(job_run).jobs
    # old page: every decision not about a pod was marked on the TrainJob's bar
    assert decision_marks(lost.rows[0]) == [] and decision_marks(clash.rows[0]) == []
    marked = {r.label: decision_marks(r) for r in lost.rows if decision_marks(r)}
    assert marked == {"JobSet lost": ["decision-delete"]}
    marked = {r.label: decision_marks(r) for r in clash.rows if decision_marks(r)}
    assert marked == {"Job clash-node-0": ["decision-delete"]}
    # what podsweeper deleted ends there, and what goes with it in the background too
    (delete,) = [d for d in lost.decisions if d.action == "delete"]
    for row in lost.rows[1:]:
        assert row.spans[-1].end == delete.time, row.label
        assert [m.time for m in row.marks if m.kind == "ended"] == [delete.time], row.label
    assert build(jobset_run).pods_left == ()
    # a decision about the TrainJob itself stays on its row
    (again,) = build(trainer_run("failed-restarted")).jobs
    assert decision_marks(again.rows[0]) == ["decision-suspend", "decision-suspend"]
    assert all(decision_marks(r) == [] for r in again.rows[1:])


def test_trainjob_has_no_clean_pod_policy_label():
    for name in ("complete", "failed-restarted", "orphan-jobset", "orphan-job"):
        run = trainer_run(name)
        (view,) = build(run).jobs
        assert view.title.startswith("TrainJob ")
        assert "cleanPodPolicy" not in view.subtitle, (name, view.subtitle)  # old: "cleanPodPolicy None"
        assert "cleanPodPolicy" not in page(run), name
        assert view.subtitle.endswith("pods through JobSet → Job"), view.subtitle
    (v1,) = build(replay([SEED_2], Settings(dry_run=False))).jobs
    assert v1.subtitle.endswith("cleanPodPolicy None")


def suspended_from_line(first: int):
    """Every TrainJob event from line `first` on has spec.suspend true (as if a person set it)."""

    def edit(number: int, event: dict) -> dict:
        data = event.get("data") or {}
        if data.get("kind") == "TrainJob" and number >= first:
            data["spec"]["suspend"] = True
        return event

    return edit


def test_suspended_trainjob_note_says_its_jobset_is_suspended(tmp_path):
    run = trainer_run("complete", tmp_path, suspended_from_line(12))
    (view,) = build(run).jobs
    (suspended,) = [s for s in view.rows[0].spans if s.label == "suspended"]
    # old note: "spec.runPolicy.suspend is true" (a v1 job's switch; v1 operators delete the pods)
    assert "runPolicy" not in suspended.note and "spec.suspend" in suspended.note, suspended.note
    assert "suspends its JobSet" in suspended.note, suspended.note


def test_suspended_v1_job_note_says_its_operator_deletes_the_pods(tmp_path):
    j = job(conditions=[("Created", at(0)), ("Running", at(2))])
    suspended = set_conditions(j, [("Created", at(0)), ("Suspended", at(30))])
    suspended["spec"]["runPolicy"]["suspend"] = True
    path = tmp_path / "suspended.jsonl"
    path.write_text(
        "".join(json.dumps(e) + "\n" for e in [event("add", j, at(0)), event("update", suspended, at(30))])
    )
    (view,) = build(replay([str(path)], Settings(dry_run=False))).jobs
    (span,) = [s for s in view.rows[0].spans if s.label == "suspended"]
    assert span.note == "spec.runPolicy.suspend is true: the operator deletes its pods"


def test_trainer_finished_states_are_coloured_by_their_kinds_conditions():
    (view,) = build(trainer_run("complete")).jobs
    assert view.rows[0].spans[-1].tone == "succeeded"  # old: "complete", a class with no colour
    last = {r.kind: (r.spans[-1].label, r.spans[-1].tone) for r in view.rows if r.kind != "Pod"}
    assert last == {
        "TrainJob": ("finished: Complete", "succeeded"),
        "JobSet": ("finished: Completed", "succeeded"),
        "Job": ("finished: Complete", "succeeded"),
    }
    (again,) = build(trainer_run("failed-restarted")).jobs
    assert ("finished: Failed", "failed") in [(s.label, s.tone) for s in again.rows[0].spans]
    jobsets = [r for r in again.rows if r.kind == "JobSet"]
    assert [r.depth for r in jobsets] == [1, 1] and jobsets[0].spans[-1].end is not None


def test_mpijob_launcher_job_has_its_row_and_a_plain_batch_job_none(tmp_path):
    mj = mpijob(policy="All", conditions=(("Created", at(0)), ("Succeeded", at(30))), completed=at(30))
    launcher = launcher_job(mj, conditions=("Complete",))
    plain = launcher_job(mj, owner={}, name="someone-elses")  # no owner, no chain's mark
    events = [
        event("add", mj, at(0)),
        event("add", launcher, at(1)),
        event("add", plain, at(1)),
        event("add", launcher_pod(launcher, "pi"), at(2)),
        event("add", worker(mj, 0), at(2)),
        event("update", mj, at(31)),
    ]
    path = tmp_path / "mpi.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    (view,) = build(replay([str(path)], Settings(dry_run=False))).jobs
    assert [(r.kind, r.label, r.depth) for r in view.rows] == [
        ("MPIJob", "MPIJob", 0),
        ("Job", "Job pi-launcher", 1),
        ("Pod", "pi-launcher-abcde", 2),
        ("Pod", "pi-worker-0", 1),
    ]
    assert view.subtitle.endswith("cleanPodPolicy All")
    assert decision_marks(view.rows[2]) == ["decision-delete"]
