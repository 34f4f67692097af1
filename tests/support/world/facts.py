"""What the upstream controllers do, pinned by the tests marked `world_facts`, and the
versions those tests last ran on.

The tests of the controllers' own behaviour (the training operator, Trainer and JobSet,
mpi-operator, Volcano, kube-controller-manager's garbage collector) prove no podsweeper
guarantee by themselves: they pin what podsweeper's rules assume. They change only when a
pinned version changes, so they run then, by `make world-facts`, which writes FACTS; every CI
run checks FACTS against the pins (tests/unit/test_world_facts.py): a version bump without a
run fails CI, and no run is needed otherwise.

    python -m tests.support.world.facts --write   # after the marked tests passed
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from tests.support.controlplane import versions
from tests.support.world.build import KWOK_VERSION

FACTS = Path(__file__).resolve().parent / "facts.json"


def pins() -> dict[str, str]:
    """Every version the marked tests run on."""
    return {
        "kubernetes": versions.KUBERNETES_VERSION,
        "etcd": versions.ETCD_VERSION,
        "kwok": KWOK_VERSION,
        "training-operator": versions.TRAINING_OPERATOR_VERSION,
        "trainer": versions.TRAINER_VERSION,
        "jobset": versions.JOBSET_VERSION,
        "mpi-operator": versions.MPI_OPERATOR_VERSION,
        "volcano": versions.VOLCANO_VERSION,
    }


def recorded() -> dict:
    return json.loads(FACTS.read_text()) if FACTS.exists() else {}


def write(passed: int) -> None:
    FACTS.write_text(
        json.dumps(
            {
                "versions": pins(),
                "passed": passed,
                "ran": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "command": "make world-facts",
            },
            indent=1,
        )
        + "\n"
    )


def main(argv: list[str]) -> int:
    if argv[:1] != ["--write"] or len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m tests.support.world.facts --write PASSED", file=sys.stderr)
        return 2
    write(int(argv[1]))
    print(f"{FACTS}: the world facts passed on {pins()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
