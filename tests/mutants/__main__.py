"""`python -m tests.mutants`: run the fast tests against each seeded bug; write docs/mutants.md.

For each mutant of tests/mutants/catalogue.py the runner patches one file in a temporary
COPY of the repository (the tracked files as they are in the working tree; the working tree
itself is never touched), runs tests/unit and tests/reliability/test_properties.py there
with PYTHONPATH pointing at the copy's function/ (checked: the imported module is the
copy's, and holds the mutated text), and records which test caught it. An unmutated
baseline run must pass first. Exit status 1 when any mutant survives (or the baseline fails).

Options: --examples N (hypothesis examples per property test, default 100), --timeout S
(per run, default 600), --only NAME[,NAME] (a subset; docs/mutants.md is then not written).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.mutants.catalogue import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "mutants.md"
# Each suite runs on its own, so the table shows whether each catches the mutant.
SUITES = {"unit tests": ["tests/unit"], "property tests": ["tests/reliability/test_properties.py"]}
TESTS = [test for tests in SUITES.values() for test in tests]
# Not tests of the function: one judges the generator, which no mutant touches; the other
# checks that each mutant's anchor is in the code, which a mutated copy fails by construction.
DESELECT = [
    "tests/reliability/test_properties.py::test_generator_reaches_every_case",
    "tests/unit/test_mutant_catalogue.py",
]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def copy_tracked(target: Path) -> None:
    """The tracked files as they are in the working tree (a file deleted there is left out)."""
    for name in git("ls-files", "-z").split("\0"):
        source = ROOT / name
        if name and source.is_file():
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)


def module_of(path: str) -> str:
    return "podsweeper." + path.removesuffix(".py").replace("/", ".")


def env_for(copy: Path, examples: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODSWEEPER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(copy / "function"), str(copy)])
    env["PODSWEEPER_PROPERTY_EXAMPLES"] = str(examples)
    env["PODSWEEPER_PROPERTY_SHRINK"] = "0"  # caught is caught: no time spent shrinking the example
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_imported(copy: Path, env: dict[str, str], mutant: Mutant | None) -> str:
    """Import the (mutated) module in the copy's environment; fail unless it is the copy's."""
    module = module_of(mutant.path) if mutant else "podsweeper"
    probe = (
        "import importlib, inspect, sys\n"
        f"m = importlib.import_module({module!r})\n"
        "print(m.__file__)\n"
        "sys.stdout.write(inspect.getsource(m))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=copy, env=env, capture_output=True, text=True, check=True
    ).stdout
    where, _, source = out.partition("\n")
    if not Path(where).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"{module} imports from {where}, not from the copy {copy}")
    if mutant is not None and mutant.new not in source:
        raise SystemExit(f"{module} at {where} does not hold mutant {mutant.name}")
    return where


def run_tests(copy: Path, env: dict[str, str], timeout: float, tests: list[str]) -> tuple[str, str, float]:
    """(result, the first failing test or '', seconds)."""
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider", "-rf"]
    for test in DESELECT:
        command += ["--deselect", test]
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "caught", f"(time limit {timeout:.0f} s)", time.monotonic() - started
    seconds = time.monotonic() - started
    if done.returncode == 0:
        return "survived", "", seconds
    failed = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", done.stdout, re.M)
    if failed is None:
        return "caught", f"(pytest exit {done.returncode}) {done.stdout[-300:]}", seconds
    return "caught", failed[1], seconds


def apply(copy: Path, mutant: Mutant) -> str:
    path = copy / "function" / "podsweeper" / mutant.path
    original = path.read_text()
    if original.count(mutant.old) != 1:
        raise SystemExit(
            f"mutant {mutant.name}: the text to replace occurs {original.count(mutant.old)} times in "
            f"function/podsweeper/{mutant.path}; update tests/mutants/catalogue.py"
        )
    path.write_text(original.replace(mutant.old, mutant.new))
    return original


def write_results(rows: list[dict], examples: int, baseline: float) -> None:
    commit = git("rev-parse", "--short", "HEAD").strip()
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", "function", "tests").strip())
    caught = sum(1 for r in rows if r["result"] == "caught")
    lines = [
        "# Seeded-bug run (`make mutants`)",
        "",
        "Generated by `python -m tests.mutants`; do not edit by hand.",
        "",
        f"* date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"* commit: {commit}"
        + (" (the working tree had uncommitted changes under function/ or tests/)" if dirty else ""),
        f"* tests run per mutant, each suite on its own and stopping at its first failure: "
        f"{'; '.join(' '.join(t) for t in SUITES.values())}, "
        f"{examples} hypothesis examples per property test",
        f"* unmutated baseline: passed in {baseline:.0f} s",
        f"* result: **{caught} of {len(rows)} mutants caught**",
        "",
        "| mutant | file | what it breaks | caught by (first failing test of each suite) | result |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        m: Mutant = r["mutant"]
        cells = []
        for suite, (result, by, _) in r["suites"].items():
            shown = f"`{by}`" if by and not by.startswith("(") else by
            cells.append(f"{suite}: {shown if result == 'caught' else 'not caught'}")
        lines.append(
            f"| {m.name} | function/podsweeper/{m.path} | {m.breaks} | {'<br>'.join(cells)} | {r['result']} |"
        )
    lines += [
        "",
        "Each mutant is a one-place textual patch (tests/mutants/catalogue.py) applied to a temporary",
        "copy of the repository; the runner checks that the imported module is the copy's mutated one.",
        "",
    ]
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants")
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--only", default="")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only.split(",")]
    with tempfile.TemporaryDirectory(prefix="podsweeper-mutants-") as tmp:
        copy = Path(tmp) / "repo"
        copy_tracked(copy)
        env = env_for(copy, args.examples)
        print(f"copy: {copy}; podsweeper imported from {check_imported(copy, env, None)}", flush=True)
        result, by, baseline = run_tests(copy, env, args.timeout, TESTS)
        print(
            f"baseline (no mutant): {'passed' if result == 'survived' else 'FAILED ' + by} ({baseline:.0f} s)"
        )
        if result != "survived":
            return 1
        rows = []
        for mutant in chosen:
            original = apply(copy, mutant)
            try:
                where = check_imported(copy, env, mutant)
                suites = {name: run_tests(copy, env, args.timeout, tests) for name, tests in SUITES.items()}
            finally:
                (copy / "function" / "podsweeper" / mutant.path).write_text(original)
            result = "caught" if any(r[0] == "caught" for r in suites.values()) else "survived"
            rows.append({"mutant": mutant, "result": result, "suites": suites})
            print(f"{mutant.name:28} {result:9} [{where}]", flush=True)
            for name, (suite_result, by, seconds) in suites.items():
                print(f"    {name:15} {suite_result:9} {seconds:4.0f} s  {by}", flush=True)
    if not args.only:
        write_results(rows, args.examples, baseline)
        print(f"written to {RESULTS.relative_to(ROOT)}")
    survivors = [r["mutant"].name for r in rows if r["result"] != "caught"]
    if survivors:
        print(f"SURVIVED: {', '.join(survivors)}", file=sys.stderr)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
