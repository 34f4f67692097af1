"""Where the reliability tests' randomness comes from: fixed by default, fresh on request.

By default every generated input is the same on every run (derandomized property tests, the
fault proxy's and the fuzzer's fixed seeds), so CI is reproducible. `PODSWEEPER_TEST_SEED=N`
draws new worlds from seed N instead: `make fresh` picks a new N on every run (CI included),
prints it first, and the same command with that N reproduces a failure exactly.
"""

from __future__ import annotations

import os

VARIABLE = "PODSWEEPER_TEST_SEED"


def fresh() -> int | None:
    """The seed a fresh run asked for, or None for the fixed inputs."""
    value = os.environ.get(VARIABLE, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"{VARIABLE} must be an integer, not {value!r}") from None


def or_fixed(default: int) -> int:
    """A component's seed: the fresh one if asked for (offset by the default, so components
    differ), else its fixed default."""
    chosen = fresh()
    return default if chosen is None else chosen + default
