"""`python -m bench` (`make bench`): run every figure, print one table, write docs/benchmarks.md.

    python -m bench                    # everything (~10 minutes on 2 cores, control plane cached)
    python -m bench --quick            # smaller sizes, shorter loads: a smoke run (figure 9: 5,000 pods)
    python -m bench --no-cluster       # skip figures 3-4 and 8-10 (no control plane)
    python -m bench --output FILE      # write somewhere else than docs/benchmarks.md
    python -m bench --only 8           # some figures only (comma-separated: --only 3,4,8); prints
                                       # the table and notes, writes a file only with --output

Figures measured together come together: 8 and 10 share one control plane (--only 8 or
--only 10 gives both), 2 and 5 one server set-up; 6 uses what 2 (and 3-4, when run) saw.

Nothing here asserts: a missed target is reported in the table (and the exit status stays
0), because these machines are shared and noisy. Every figure is measured next to its
baseline in the same run and shown as a ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.report import Row, machine, say, text_table, write_markdown

ROOT = Path(__file__).resolve().parents[1]
ANALYSIS = Path(__file__).resolve().parent / "analysis.md"

PREAMBLE = """
`make bench` (`python -m bench`) measures podsweeper against a baseline measured in the same
run, and reports the ratio: the machines this runs on are shared, so absolute numbers move
from run to run while ratios of neighbouring measurements hold. Nothing in the test suite
asserts on time. Sources: `bench/` (`bench/stream.py` describes the synthetic stream,
each module its method).
"""


def _guard(rows: list[Row], figure: str, what: str, fn):
    """Run one figure; a failure becomes a 'not measured' row with the reason."""
    try:
        return fn()
    except Exception as error:  # noqa: BLE001 - a benchmark must still write the rest of the table
        traceback.print_exc()
        rows.append(
            Row(
                figure,
                what,
                "not measured",
                "-",
                "-",
                "",
                None,
                [f"failed: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"],
            )
        )
        return None


FIGURES = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "10")


def _figures(text: str) -> set[str]:
    chosen = {part.strip() for part in text.split(",") if part.strip()}
    unknown = chosen - set(FIGURES)
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"figures are {', '.join(FIGURES)} (comma-separated); not {', '.join(sorted(unknown)) or 'empty'}"
        )
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter loads")
    parser.add_argument("--no-cluster", action="store_true", help="skip figures 3-4 and 8-10 (control plane)")
    parser.add_argument(
        "--only",
        type=_figures,
        metavar="FIGURES",
        help="run these figures only (e.g. 8 or 3,4); docs/benchmarks.md is then left alone",
    )
    parser.add_argument(
        "--output",
        "--out",
        help="where to write the markdown (default docs/benchmarks.md; a partial run writes only if given)",
    )
    args = parser.parse_args(argv)
    only: set[str] | None = args.only

    def want(*figures: str) -> bool:
        return only is None or any(f in only for f in figures)

    output = args.output or (None if only else str(ROOT / "docs" / "benchmarks.md"))

    started = time.monotonic()
    info = machine()
    say("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    workdir = Path(tempfile.mkdtemp(prefix="podsweeper-bench-"))

    from bench import inprocess, served
    from bench import profile as profiling

    inprocess.quiet_logging()
    rows: list[Row] = []
    sections: list[str] = []

    # Servers first, while this process is small and quiet.
    served_out = None
    if want("2", "5", "6"):
        served_out = _guard(
            rows,
            "2",
            "HTTP throughput, cold start",
            lambda: served.run_all(workdir, duration=0.8 if args.quick else 1.5),
        )
    memory = None
    if served_out:
        served_rows, memory = served_out
        rows += served_rows

    jobs = 200 if args.quick else 1000
    fig1 = _guard(rows, "1", "in-process events/s", lambda: inprocess.figure1(jobs)) if want("1") else None
    if fig1:
        row, _result, stream = fig1
        rows.append(row)
        del stream, _result
        shares = _guard(rows, "1", "profile", lambda: profiling.where_time_goes(200))
        if shares:
            sections.append(profiling.markdown(*shares))

    sizes = (100, 1000, 2000) if args.quick else (100, 1000, 10000)
    if want("7"):
        scale = _guard(rows, "7", "scale", lambda: inprocess.figure7(sizes))
        rows += scale or []

    under_api = None
    cluster = want("3", "4", "8", "9", "10")
    if cluster and args.no_cluster:
        rows.append(
            Row(
                "3-4, 8-10",
                "API requests per event, cleanup latency, big jobs and big clusters",
                "not measured",
                "-",
                "-",
                "",
                None,
                ["--no-cluster was given"],
            )
        )
    elif cluster:
        from bench import apiserver

        if want("3", "4"):
            out = _guard(
                rows,
                "3-4",
                "API cost and cleanup latency on the control plane",
                lambda: apiserver.run_all(
                    workdir, cost_jobs=10 if args.quick else 30, latency_jobs=10 if args.quick else 50
                ),
            )
            if out:
                cluster_rows, under_api = out
                rows += cluster_rows

        from bench import bigjobs

        if want("8", "9", "10"):
            big = _guard(
                rows,
                "8-10",
                "big jobs, big clusters",
                lambda: bigjobs.run_all(workdir, quick=args.quick, cleanup=want("8", "10"), sweep=want("9")),
            )
            rows += big or []

    if memory and want("6"):
        rows.append(served.memory_row(memory, under_api))

    order = {
        "1": 0,
        "2a": 1,
        "2b": 2,
        "3a": 3,
        "3b": 4,
        "3c": 5,
        "3-4": 6,
        "4a": 7,
        "4b": 8,
        "5": 9,
        "6": 10,
        "7a": 11,
        "7b": 12,
        "7": 13,
        "8a": 14,
        "8b": 15,
        "8c": 16,
        "8d": 17,
        "9a": 18,
        "9b": 19,
        "9c": 19.1,
        "9d": 19.2,
        "10": 20,
        "8-10": 21,
    }
    rows.sort(key=lambda r: order.get(r.figure, 99))
    elapsed = time.monotonic() - started
    print()
    print(text_table(rows))
    if ANALYSIS.exists():
        sections.append(ANALYSIS.read_text().strip())
    command = (
        "python -m bench"
        + (" --quick" if args.quick else "")
        + (" --no-cluster" if args.no_cluster else "")
        + (f" --only {','.join(sorted(only, key=FIGURES.index))}" if only else "")
    )
    if output is None:
        print()
        for row in rows:
            for note in row.notes:
                print(f"- {row.figure}: {note}")
        say(
            f"partial run ({command}) after {elapsed:.0f} s: docs/benchmarks.md left as it is (--output FILE writes one)"
        )
        return 0
    write_markdown(output, rows, info, PREAMBLE, sections, elapsed, command)
    say(f"wrote {output} after {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
