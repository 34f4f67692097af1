"""`python -m tests.mutants`: run each seeded bug against the suites that must catch it.

For each mutant of tests/mutants/catalogue.py the runner patches one file in a temporary
COPY of the repository (the tracked files as they are in the working tree; the working tree
itself is never touched) and runs, each on its own, every suite the mutant names, with
PYTHONPATH pointing at the copy's function/. Before the suites run it checks that the module
the copy imports is the copy's and that its text is exactly the original with the one patch
applied (so an empty replacement is checked too).

A suite's verdict is read from pytest's own report:
* caught: pytest exited 1 and printed a FAILED line (a test asserted against the bug);
* survived: pytest exited 0;
* inconclusive: anything else (a time-out, a collection or fixture ERROR, a crash, an
  interrupted run): it proves nothing, and it fails the run like a survivor.
A mutant is caught when every suite it names caught it. An unmutated baseline of every suite
used must pass first. Exit status 1 unless every mutant is caught.

Options: --examples N (hypothesis examples per property test, default 200: at 40, five
mutants the property tests are meant to catch survived them; at 200 each is caught), --timeout S (per suite run, default 600), --only NAME[,NAME]
(a subset; docs/mutants.md is then not written), --jobs N (mutants run side by side, each in
its own copy; default 2), --budget MINUTES with --seed N (a sample: the mutants in an order
drawn from the seed, started until the budget (after the baselines) is spent, at least one,
each started one run to its verdict;
docs/mutants.md is then not written; what CI runs, the whole sweep being `make mutants`),
--baselines-passed (the tree's own pytest run just passed: the suites whose run is the same
here are not run unmutated again; the property suite is, at this runner's example count).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from tests.mutants.catalogue import MUTANTS, Mutant, Suite

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "mutants.md"
# Not tests of the function: the catalogue check (a mutated copy fails it by construction) and
# the guarantees page check (docs against tests).
DESELECT = ["tests/unit/test_mutant_catalogue.py", "tests/unit/test_guarantees_page.py"]


class Verdict(StrEnum):
    CAUGHT = "caught"
    SURVIVED = "survived"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class SuiteRun:
    verdict: Verdict
    by: str  # the first FAILED test, or why the run proves nothing
    seconds: float


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
    # The property suite is credited only with what its generated examples catch: the examples
    # pinned after fixed disagreements are left out of every seeded-bug run.
    env["PODSWEEPER_PROPERTY_EXPLICIT"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # The cached Go-built control plane is shared; where it lives comes from the environment.
    for name in ("PODSWEEPER_CACHE", "PODSWEEPER_PROPERTY_SEED"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def check_imported(copy: Path, env: dict[str, str], mutant: Mutant | None, expected: str | None) -> str:
    """Import the (mutated) module in the copy's environment; fail unless it is the copy's file
    and holds exactly `expected` (the original text with the one patch applied)."""
    module = module_of(mutant.path) if mutant else "podsweeper"
    probe = f"import importlib\nprint(importlib.import_module({module!r}).__file__)\n"
    where = subprocess.run(
        [sys.executable, "-c", probe], cwd=copy, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"{module} imports from {where}, not from the copy {copy}")
    if expected is not None and Path(where).read_text() != expected:
        raise SystemExit(f"{module} at {where} does not hold exactly mutant {mutant.name if mutant else ''}")
    return where


def verdict_of(returncode: int, stdout: str) -> tuple[Verdict, str]:
    """pytest's exit code and report -> the verdict (see the module docstring)."""
    if returncode == 0:
        return Verdict.SURVIVED, ""
    failed = re.search(r"^FAILED (\S+)", stdout, re.M)
    errors = re.search(r"^ERROR (\S+)", stdout, re.M)
    if returncode == 1 and failed is not None and errors is None:
        return Verdict.CAUGHT, failed[1]
    tail = " ".join(stdout.strip().splitlines()[-2:])[-200:]
    return Verdict.INCONCLUSIVE, f"pytest exit {returncode}: {tail}"


def run_suite(copy: Path, env: dict[str, str], timeout: float, suite: Suite | tuple[str, ...]) -> SuiteRun:
    """One pytest run of a suite (or of some of its tests: a tuple of pytest arguments)."""
    tests = suite.value if isinstance(suite, Suite) else suite
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider", "-rfE"]
    for test in DESELECT:
        command += ["--deselect", test]
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return SuiteRun(Verdict.INCONCLUSIVE, f"time limit {timeout:.0f} s", time.monotonic() - started)
    verdict, by = verdict_of(done.returncode, done.stdout)
    return SuiteRun(verdict, by, time.monotonic() - started)


def baseline_parts(suites: list[Suite], copies: int) -> list[tuple[Suite, tuple[str, ...]]]:
    """The unmutated runs, as many side by side as there are copies: when there are fewer
    suites than copies (a CI sample reruns the property suite alone, 85 s while the other copy
    sat idle), a suite named by test ids is split among the copies left over."""
    spare = max(1, copies // max(1, len(suites)))
    parts: list[tuple[Suite, tuple[str, ...]]] = []
    for suite in suites:
        ids = suite.value
        ways = min(spare, len(ids)) if all("::" in arg for arg in ids) else 1
        parts += [(suite, ids[start::ways]) for start in range(ways)]
    return parts


def joined(runs: list[SuiteRun]) -> SuiteRun:
    """A suite's verdict from its parts: it passed only if every part did (a failed part's
    verdict and test first), in the longest part's time."""
    seconds = max(run.seconds for run in runs)
    for run in runs:
        if run.verdict is not Verdict.SURVIVED:
            return SuiteRun(run.verdict, run.by, seconds)
    return SuiteRun(Verdict.SURVIVED, "", seconds)


def apply(copy: Path, mutant: Mutant) -> tuple[str, str]:
    """Patch the copy; (original text, mutated text)."""
    path = copy / "function" / "podsweeper" / mutant.path
    original = path.read_text()
    if original.count(mutant.old) != 1:
        raise SystemExit(
            f"mutant {mutant.name}: the text to replace occurs {original.count(mutant.old)} times in "
            f"function/podsweeper/{mutant.path}; update tests/mutants/catalogue.py"
        )
    mutated = original.replace(mutant.old, mutant.new)
    path.write_text(mutated)
    return original, mutated


def result_of(suites: dict[Suite, SuiteRun]) -> Verdict:
    verdicts = {run.verdict for run in suites.values()}
    if verdicts == {Verdict.CAUGHT}:
        return Verdict.CAUGHT
    return Verdict.SURVIVED if Verdict.SURVIVED in verdicts else Verdict.INCONCLUSIVE


def tree_state() -> tuple[str, bool]:
    """The commit the copies are taken from, and whether function/ or tests/ differed from it."""
    commit = git("rev-parse", "--short", "HEAD").strip()
    return commit, bool(
        git("status", "--porcelain", "--untracked-files=no", "--", "function", "tests").strip()
    )


def write_results(
    rows: list[dict],
    examples: int,
    baseline: dict[Suite, SuiteRun],
    seconds: float,
    state: tuple[str, bool],
) -> None:
    commit, dirty = state  # taken when the copies were made: the tree may move on during a run
    caught = sum(1 for r in rows if r["result"] is Verdict.CAUGHT)
    lines = [
        "# Seeded-bug run (`make mutants`)",
        "",
        "Generated by `python -m tests.mutants` (`make mutants`); do not edit by hand. CI runs a sample",
        "of these on every run (`make mutants-sample`).",
        "",
        f"* date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"* commit: {commit}"
        + (" (the working tree had uncommitted changes under function/ or tests/)" if dirty else ""),
        "* each mutant runs only the suites it names, each on its own and stopping at its first "
        f"failure; property tests at {examples} generated hypothesis examples each (derandomized; the pinned @examples left out)",
        "* caught = a FAILED test line; a time-out, an ERROR or a crash is inconclusive and fails the run",
        "* unmutated baseline: "
        + ", ".join(
            f"{s.label} {r.verdict.value.replace('survived', 'passed')} in {r.seconds:.0f} s"
            for s, r in baseline.items()
        ),
        f"* result: **{caught} of {len(rows)} mutants caught** in {seconds / 60:.1f} min",
        "",
        "| mutant | file | what it breaks | must be caught by: first failing test | result |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        m: Mutant = r["mutant"]
        cells = []
        for suite, run in r["suites"].items():
            shown = (
                f"`{run.by}`" if run.verdict is Verdict.CAUGHT else f"{run.verdict.value} {run.by}".strip()
            )
            cells.append(f"{suite.label}: {shown}")
        lines.append(
            f"| {m.name} | function/podsweeper/{m.path} | {m.breaks} | {'<br>'.join(cells)} | "
            f"{r['result'].value} |"
        )
    lines += [
        "",
        "Each mutant is a one-place textual patch (tests/mutants/catalogue.py) applied to a temporary",
        "copy of the repository; the runner checks that the imported module is the copy's, holding",
        "exactly the patched text.",
        "",
    ]
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines))


def run_mutant(copy: Path, env: dict[str, str], timeout: float, mutant: Mutant) -> dict:
    original, mutated = apply(copy, mutant)
    try:
        where = check_imported(copy, env, mutant, mutated)
        suites = {suite: run_suite(copy, env, timeout, suite) for suite in mutant.suites}
    finally:
        (copy / "function" / "podsweeper" / mutant.path).write_text(original)
    result = result_of(suites)
    report = [f"{mutant.name:30} {result.value:12} [{where}]"]
    for suite, run in suites.items():
        report.append(f"    {suite.label:9} {run.verdict.value:12} {run.seconds:4.0f} s  {run.by}")
    print("\n".join(report), flush=True)
    return {"mutant": mutant, "result": result, "suites": suites}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--only", default="")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--budget", type=float, default=0.0, help="minutes; 0 = every mutant")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--baselines-passed", action="store_true")
    args = parser.parse_args(argv)
    names = {m.name for m in MUTANTS}
    wanted = [n for n in args.only.split(",") if n]
    if unknown := sorted(set(wanted) - names):
        raise SystemExit(f"no such mutant: {', '.join(unknown)}")
    chosen = [m for m in MUTANTS if not wanted or m.name in wanted]
    sampled = args.budget > 0
    if sampled:
        seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
        random.Random(seed).shuffle(chosen)
        print(
            f"a sample of the {len(chosen)} mutants, in the order drawn from seed {seed}, started for "
            f"{args.budget:g} min (again: python -m tests.mutants --budget {args.budget:g} --seed {seed})",
            flush=True,
        )
    used = [s for s in Suite if any(s in m.suites for m in chosen)]
    started = time.monotonic()
    state = tree_state()
    with tempfile.TemporaryDirectory(prefix="podsweeper-mutants-") as tmp:
        copies = []
        for index in range(max(1, args.jobs)):
            copy = Path(tmp) / f"repo-{index}"
            copy_tracked(copy)
            copies.append(copy)
        env = env_for(copies[0], args.examples)
        print(f"copy: {copies[0]}; podsweeper imported from {check_imported(copies[0], env, None, None)}")

        def unmutated(item: tuple[int, tuple[Suite, tuple[str, ...]]]) -> tuple[Suite, SuiteRun]:
            copy = copies[item[0] % len(copies)]  # the parts side by side, one per copy
            suite, tests = item[1]
            return suite, run_suite(copy, env_for(copy, args.examples), args.timeout, tests)

        # Only the property suite draws other examples here than in the tree's own run.
        rerun = [s for s in used if s is Suite.PROPERTY or not args.baselines_passed]
        with ThreadPoolExecutor(len(copies)) as pool:
            runs = list(pool.map(unmutated, enumerate(baseline_parts(rerun, len(copies)))))
        baseline = {suite: joined([run for s, run in runs if s is suite]) for suite in rerun}
        for suite in used:
            if suite not in baseline:
                print(f"baseline {suite.label:9} passed in this tree's own run (not run again)", flush=True)
        for suite, run in baseline.items():
            print(
                f"baseline {suite.label:9} {'passed' if run.verdict is Verdict.SURVIVED else 'FAILED ' + run.by}"
                f" ({run.seconds:.0f} s)",
                flush=True,
            )
        if any(run.verdict is not Verdict.SURVIVED for run in baseline.values()):
            return 1
        free = list(copies)
        rows: dict[str, dict] = {}
        begun: list[str] = []
        sampling = time.monotonic()  # the budget counts from here: the baselines are not in it

        def one(mutant: Mutant) -> None:
            if sampled and begun and time.monotonic() - sampling > args.budget * 60:
                return  # the budget is spent: started mutants finish, no new one starts
            begun.append(mutant.name)
            copy = free.pop()
            try:
                rows[mutant.name] = run_mutant(copy, env_for(copy, args.examples), args.timeout, mutant)
            finally:
                free.append(copy)

        with ThreadPoolExecutor(len(copies)) as pool:
            list(pool.map(one, chosen))
    ordered = [rows[m.name] for m in chosen if m.name in rows]
    if sampled:
        left = [m.name for m in chosen if m.name not in rows]
        print(f"the budget left {len(left)} mutants for another run: {', '.join(left) or 'none'}")
    if not wanted and not sampled:
        write_results(ordered, args.examples, baseline, time.monotonic() - started, state)
        print(f"written to {RESULTS.relative_to(ROOT)}")
    failing = [
        f"{r['mutant'].name} ({r['result'].value})" for r in ordered if r["result"] is not Verdict.CAUGHT
    ]
    print(
        f"{len(ordered) - len(failing)} of {len(ordered)} mutants caught in {(time.monotonic() - started) / 60:.1f} min"
    )
    if failing:
        print(f"NOT CAUGHT: {', '.join(failing)}", file=sys.stderr)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
