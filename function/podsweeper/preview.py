"""What a dry-run sweep held back, for the person who ran it: the deletes and suspends by rule
and namespace, the GPUs they would free, and the command that acts.

`podsweeper sweep` is a dry run unless given --live; its decision lines say the same one by
one, this says it in a few lines a person can act on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from podsweeper.actions import Applied, dry_run
from podsweeper.config import Settings
from podsweeper.decisions import Action, Result

# The acts a dry run holds back, in the order the preview lists them. A warning is not one:
# it is written in a dry run too (it changes nothing but an Event).
HELD = (Action.DELETE, Action.FORCE_DELETE, Action.SUSPEND)

# (action, rule, namespace, kind): one line of the table.
Row = tuple[Action, str, str, str]


def preview(applied: Iterable[Applied], live_command: str, live: Settings) -> list[str]:
    """The preview's lines. `live`: the settings the sweep decided with, those --live acts
    with; a namespace whose own podsweeper.dev/mode is dry-run holds its acts back even then,
    and PODSWEEPER_MAX_DELETES_PER_EVENT bounds what one live sweep deletes."""
    objects: dict[bool, dict[Row, set[str]]] = {True: defaultdict(set), False: defaultdict(set)}
    gpus: dict[bool, dict[Row, int]] = {True: defaultdict(int), False: defaultdict(int)}
    warned = 0
    for item in applied:
        decision = item.decision
        warned += item.result is Result.WARNED
        if item.result is not Result.DRY_RUN or decision.action not in HELD:
            continue
        # A suspend is of the job, decided once per looping pod: the job counts once.
        suspends = decision.action is Action.SUSPEND
        kind = decision.job.kind.kind if suspends else decision.kind
        acts = not dry_run(decision, live)
        row = (decision.action, decision.rule.value, decision.namespace, kind)
        objects[acts][row].add(decision.job.name if suspends else decision.name)
        gpus[acts][row] += decision.gpus
    lines: list[str] = []
    if objects[True]:
        lines += ["dry run: nothing was deleted or suspended. A live sweep would:"]
        lines += _table(objects[True], gpus[True])
        lines.append(f"GPUs it would free: {sum(gpus[True].values())}")
        deletes = sum(len(names) for row, names in objects[True].items() if row[0].deletes)
        if deletes > live.max_deletes_per_event:
            lines.append(
                f"One live sweep sends at most {live.max_deletes_per_event} DELETEs "
                "(PODSWEEPER_MAX_DELETES_PER_EVENT); the next sweeps go on with the rest."
            )
    else:
        lines.append("dry run: a live sweep would delete or suspend nothing.")
    if objects[False]:
        lines.append("Held back even live (the namespace's podsweeper.dev/mode is dry-run):")
        lines += _table(objects[False], gpus[False])
    if warned:
        lines.append(f"Warning Events a live sweep would write: {warned}")
    if objects[True]:
        lines.append(f"To act: {live_command}")
    return lines


def _table(objects: dict[Row, set[str]], gpus: dict[Row, int]) -> list[str]:
    rows = sorted(objects, key=lambda row: (HELD.index(row[0]), *row[1:]))
    cells = [
        (action.value, rule, namespace, _count(len(objects[row]), kind), _count(gpus[row], "GPU"))
        for row in rows
        for action, rule, namespace, kind in [row]
    ]
    widths = [max(len(cell[i]) for cell in cells) for i in range(4)]
    return ["  " + "  ".join(cell[i].ljust(widths[i]) for i in range(4)) + "  " + cell[4] for cell in cells]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
