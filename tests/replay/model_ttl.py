"""Rule expired-trainjob (opt-in) in the generated worlds: its settings and a finished TrainJob.

Drawn last in model_world.scenarios (after every other draw, so the streams drawn before it and
the seeded bugs they catch stay what they were): PODSWEEPER_TRAINJOB_TTL_SECONDS on in about one
run in three, short enough that a finish within the stream has passed it by the final sweep
(three hours after the stream) or even by a tick within it, or so long that it never has; its
floor PODSWEEPER_TRAINJOB_TTL_MIN_SECONDS; a namespace's podsweeper.dev/trainjob-ttl-seconds
(allowed, refused, off); and a story, `ttl_story`: a TrainJob that finishes (Complete or
Failed, dated by its condition's lastTransitionTime), its pods ending, with what may keep it:
its own podsweeper.dev/ttl-seconds-after-finished (off, shorter, longer, not a number), its
opt-out, a suspend, another controller's spec.managedBy, an ownerReference, Trainer's own
spec.ttlSecondsAfterFinished, its JobSet deleted and made again after the finish, a pod still
running. Ticks follow the finish, some before its TTL has passed and some after.

The trainer lines (model_trainer.py) finish TrainJobs too: with the TTL on, the rule meets
them as they are (some suspended, some managed by MultiKueue, some restarted, some with pods
running on). oracle.py judges every TrainJob delete, restating docs/rules.md.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import strategies as st

from tests.fixtures import trainer as fixtures
from tests.replay.model_trainer import (
    FINISHED_KINDS,
    RECREATED_AFTER,
    TRAIN_NAMES,
    TrainJobSpec,
    _jobset,
    _Story,
)
from tests.replay.model_world import NAMESPACES, T0, NamespaceSpec, OwnerSpec

NAMESPACE_TTL = "podsweeper.dev/trainjob-ttl-seconds"
# The platform's TTL: 0 (off) two runs in three; else past by the final sweep (3 h after the
# stream) or, at 60 s, by ticks within the stream; 10**6: never within a run.
TTL_SECONDS = (60, 600, 3600, 10**6)
TTL_FLOORS = (600, 600, 0, 30)
# A job's own podsweeper.dev/ttl-seconds-after-finished: mostly none; off, shorter, longer, and
# values that are no number of seconds (ignored: the TTL in force holds).
TTL_ASKED = (None, "off", None, "30", "120", "900", "99999999", "1h", " 45 ", "-5", "1234567890", "Off")
# A namespace's podsweeper.dev/trainjob-ttl-seconds: off, seconds (refused below the floor or
# where the platform left the TTL off), not a number.
NAMESPACE_TTLS = ("off", "60", "900", "7200", "x", "10")
# What may keep a finished TrainJob past its TTL (or nothing).
KEEPERS = (
    "owned",
    "suspended",
    "none",
    "own-ttl",
    "managed-by-other",
    "none",
    "restarted",
    "running-pod",
    "none",
)
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
# Ticks after the finish (seconds): within a short TTL, past it, past a long one, and a second
# before and at the TTLs the settings above make (a delete one second early is one too early).
TICKS_AFTER = (59, 599, 10, 45, 90, 700, 4000, 60, 600, 29, 119, 899, 3599, 3600)


@st.composite
def ttl_settings(draw) -> dict:
    """PODSWEEPER_TRAINJOB_TTL_SECONDS (0: off) and PODSWEEPER_TRAINJOB_TTL_MIN_SECONDS."""
    on = draw(st.integers(0, 2)) == 0
    return {
        "trainjob_ttl_seconds": draw(st.sampled_from(TTL_SECONDS)) if on else 0,
        "trainjob_ttl_min_seconds": draw(st.sampled_from(TTL_FLOORS)),
    }


@st.composite
def ttl_story(
    draw, taken: frozenset, chosen: dict
) -> tuple[list[tuple[int, str, object]], tuple[str, str] | None]:
    """A TrainJob under a name no other line has: made, running, finished, maybe kept by
    something; ticks after its finish, some a second before and at the TTLs `chosen` (the
    run's settings) and its annotation make. (seconds, verb, spec; a tick's spec is None), and
    the namespace's trainjob-ttl-seconds annotation to add ((namespace, value); None: none)."""
    story = _Story()
    free = [(ns, name) for ns in NAMESPACES for name in TRAIN_NAMES if (ns, name) not in taken]
    ns, name = draw(st.sampled_from(free))
    t = draw(st.integers(0, 600))
    created = T0 + timedelta(seconds=t)
    keeper = draw(st.sampled_from(KEEPERS))
    uid = f"tj-ttl-{ns}-{name}"
    tj = TrainJobSpec(
        ns,
        name,
        uid,
        created,
        (("Created", "True", created),),
        None,
        draw(st.sampled_from((None,) * 5 + ("true", "false"))),
        # Restarted: queued by Kueue, so finished-trainjob-restarted only warns (a suspend would
        # keep it anyway): what keeps it is the JobSet made after its finish.
        queued=keeper == "restarted",
        managed_by=MULTIKUEUE if keeper == "managed-by-other" else None,
        ttl_asked=draw(st.sampled_from(TTL_ASKED)),
        owner=(
            OwnerSpec("trainer.kubeflow.org/v1alpha1", "OptimizationJob", "sweep", f"opt-{ns}", True)
            if keeper == "owned"
            else None
        ),
        own_ttl=draw(st.sampled_from((0, 3600))) if keeper == "own-ttl" else None,
    )
    t = story.emit(t, "add", tj)
    owner = OwnerSpec(fixtures.TRAINER, "TrainJob", name, uid, True)
    js, jobs, pods = _jobset(draw, story, ns, name, f"js-ttl-{ns}-{name}-0", owner, t, created)
    t += draw(st.integers(5, 300))
    finished_at = T0 + timedelta(seconds=t)
    how = draw(st.sampled_from(FINISHED_KINDS))
    finish = (("Created", "True", created), (how, "True", finished_at))
    t = story.change(t, tj, conditions=finish, suspended=keeper == "suspended")
    for position, pod in enumerate(pods):  # its pods end, or go; one runs on if it must
        if keeper == "running-pod" and position == 0:
            story.change(t + draw(st.integers(0, 40)), pod, phase="Running")
        elif draw(st.integers(0, 3)):
            story.change(
                t + draw(st.integers(0, 40)), pod, phase=draw(st.sampled_from(["Succeeded", "Failed"]))
            )
        else:
            story.delete(t + draw(st.integers(0, 40)), pod)
    if keeper == "restarted":  # its JobSet deleted, and made again after the finish
        t += draw(st.integers(1, 60))
        for obj in (*pods, *jobs, js):
            story.delete(t, obj)
        again = finished_at + timedelta(seconds=draw(st.sampled_from(RECREATED_AFTER)))
        t = max(int((again - T0).total_seconds()), t + 1)
        _, _, remade = _jobset(draw, story, ns, name, f"js-ttl-{ns}-{name}-1", owner, t, again)
        if draw(st.booleans()):  # its pods done: only the JobSet's creation keeps the job then
            for pod in remade:
                story.change(t + draw(st.integers(1, 40)), pod, phase="Succeeded")
    items = list(story.items)
    done = int((finished_at - T0).total_seconds())
    ttl, floor = chosen["trainjob_ttl_seconds"], chosen["trainjob_ttl_min_seconds"]
    asked = (tj.ttl_asked or "").strip()
    marks = [m for m in (ttl, max(int(asked), floor, 1) if asked.isdigit() else 0) if 0 < m < 10**5]
    for _ in range(draw(st.integers(0, 2))):
        items.append((done + draw(st.sampled_from(TICKS_AFTER)), "ping", None))
    if marks and draw(st.booleans()):  # ticks a second before each TTL, and at it
        for mark in marks:
            items += [(done + mark - 1, "ping", None), (done + mark, "ping", None)]
    if draw(st.integers(0, 5)) == 0:  # a person deletes it (its chain with it) at last
        end = max(t, *(at for at, _, _ in items)) + draw(st.integers(1, 100))
        items.append((end, "delete", story.latest[uid]))
    note = draw(st.sampled_from(NAMESPACE_TTLS)) if draw(st.integers(0, 2)) == 0 else None
    return items, (ns, note) if note is not None else None


def with_namespace_ttl(specs: list[NamespaceSpec], note: tuple[str, str]) -> list[NamespaceSpec]:
    """The namespaces' policies with one namespace's trainjob-ttl-seconds added (its other
    annotations kept: a Namespace event shows all of them)."""
    namespace, value = note
    out, found = [], False
    for spec in specs:
        if spec.name == namespace:
            found = True
            spec = NamespaceSpec(
                namespace, tuple(sorted({**dict(spec.annotations), NAMESPACE_TTL: value}.items()))
            )
        out.append(spec)
    return out if found else [*out, NamespaceSpec(namespace, ((NAMESPACE_TTL, value),))]
