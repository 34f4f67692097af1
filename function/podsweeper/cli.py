"""The `podsweeper` command: replay recorded events, or sweep a real cluster once."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from podsweeper.config import ENV_PREFIX, load_settings
from podsweeper.errors import ApiUnavailable, ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podsweeper",
        description="Clean up pods that Kubeflow training jobs leave behind. "
        "Configuration comes from PODSWEEPER_* variables.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    replay = sub.add_parser(
        "replay",
        help="replay recorded CloudEvents: what would podsweeper do, and why",
        description="Replay recorded CloudEvents against a simulated cluster built from them: "
        "nothing real is read or changed, so the replay shows what a live function would do "
        "(PODSWEEPER_DRY_RUN=true in the environment shows what a dry-run one would).",
    )
    replay.add_argument("files", nargs="+", metavar="FILE.jsonl")
    replay.add_argument("--json", action="store_true", help="one JSON object per decision per line")
    replay.add_argument(
        "--no-final-sweep",
        action="store_true",
        help="leave out the sweep the replay runs after the last event (what the PingSource would do)",
    )
    replay.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write one self-contained HTML page with a timeline per job "
        "(the text or JSON output still prints)",
    )

    sweep = sub.add_parser(
        "sweep",
        help="one backstop sweep of a real cluster (a dry run unless --live)",
        description="One backstop sweep of a real cluster with your credentials. A dry run "
        "unless --live: it decides and reports, deletes and suspends nothing, and ends with "
        "what a live sweep would do and the command that does it.",
    )
    sweep.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
    mode = sweep.add_mutually_exclusive_group()
    mode.add_argument(
        "--live",
        action="store_true",
        help="delete and suspend (PODSWEEPER_DRY_RUN is not read here: only this flag acts)",
    )
    mode.add_argument("--dry-run", action="store_true", help="the default; accepted for scripts")
    sweep.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="limit to this namespace (repeatable; default PODSWEEPER_NAMESPACES)",
    )

    evidence = sub.add_parser("evidence", help="what made a job's containers fail, as podsweeper kept it")
    evidence.add_argument("job", metavar="NAMESPACE/JOB")
    evidence.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
    evidence.add_argument("--json", action="store_true", help="the records, one JSON object per line")

    record = sub.add_parser("record", help="record a watch as ApiServerSource-format CloudEvents")
    record.add_argument("--kubeconfig")
    record.add_argument("-n", "--namespace", required=True)
    record.add_argument("--out", required=True, help="JSON Lines file to write")
    record.add_argument("--seconds", type=float, default=None, help="stop after this long")
    record.add_argument("--mode", choices=("Resource", "Reference"), default="Resource")
    return parser


def _replay(args: argparse.Namespace) -> int:
    from podsweeper.replay import MalformedLine, replay
    from podsweeper.timeline import print_header, print_step_human, print_step_json, print_summary

    # A replay touches nothing real: it shows what a live function would do, unless the
    # environment says PODSWEEPER_DRY_RUN itself.
    said = any(name.upper() == f"{ENV_PREFIX}DRY_RUN" for name in os.environ)
    settings = load_settings() if said else load_settings(dry_run=False)
    printer = print_step_json if args.json else print_step_human
    if not args.json:
        print_header(args.files, sys.stdout)
    try:
        run = replay(
            args.files,
            settings,
            on_step=lambda step: printer(step, sys.stdout),
            final_sweep=not args.no_final_sweep,
        )
    except MalformedLine as error:
        print(f"podsweeper replay: malformed event at {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"podsweeper replay: {error}", file=sys.stderr)
        return 2
    if not args.json:
        print_summary(run, sys.stdout)
    if args.html:
        from podsweeper.page import page

        try:
            with open(args.html, "w", encoding="utf-8") as out:
                out.write(page(run))
        except OSError as error:
            print(f"podsweeper replay: {error}", file=sys.stderr)
            return 2
        print(f"wrote {args.html}", file=sys.stderr)
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from podsweeper.cluster.base import Cluster
    from podsweeper.cluster.kube import connect
    from podsweeper.cluster.readonly import ReadOnly
    from podsweeper.intake import parse_event
    from podsweeper.pipeline import Pipeline
    from podsweeper.report import setup_logging
    from podsweeper.triggers import PING_TYPE

    overrides: dict[str, Any] = {}
    if args.namespace:
        overrides["namespaces"] = ",".join(args.namespace)
    # Only --live acts. Without it the sweep decides as a live one would (a namespace's
    # policy read as the deployed function reads it) and holds every act back: neither
    # PODSWEEPER_DRY_RUN=false nor a namespace's own `live` mode makes a look at a cluster delete.
    settings = load_settings(**overrides, dry_run=False)
    setup_logging()
    cluster: Cluster = connect(settings, args.kubeconfig, make_record_key=args.live)
    skipped: Counter[str] = Counter()
    if not args.live:  # a look changes nothing: no Event, no record, no key written
        cluster = ReadOnly(cluster, lambda what: skipped.update([what]))
    pipeline = Pipeline(cluster, settings, hold=not args.live)
    attributes = {
        "id": f"cli-sweep-{int(time.time())}",
        "source": "podsweeper-cli",
        "type": PING_TYPE,
        "specversion": "1.0",
    }
    print(
        f"sweeping {', '.join(sorted(settings.namespace_set)) or 'all namespaces'}"
        f"{'' if args.live else ' (dry run: --live acts)'}...",
        file=sys.stderr,
    )
    outcome = pipeline.handle(parse_event(attributes, None), datetime.now(UTC))
    print(json.dumps(outcome.summary), file=sys.stderr)
    if not args.live:
        from podsweeper.preview import preview

        lines = preview(outcome.applied, _live_command(args), settings)
        print("\n".join(lines), file=sys.stderr)
        if skipped:
            held = ", ".join(f"{n} {what}{'s' if n > 1 else ''}" for what, n in sorted(skipped.items()))
            print(f"not written (a dry run writes nothing): {held}", file=sys.stderr)
    return 0


def _live_command(args: argparse.Namespace) -> str:
    """The command that runs this sweep live, as a person can paste it."""
    argv = ["podsweeper", "sweep"]
    if args.kubeconfig:
        argv += ["--kubeconfig", args.kubeconfig]
    for namespace in args.namespace:
        argv += ["-n", namespace]
    return shlex.join([*argv, "--live"])


def _evidence(args: argparse.Namespace) -> int:
    from podsweeper.cluster.kube import connect
    from podsweeper.kinds import TRAINING_KINDS
    from podsweeper.model import JobRef
    from podsweeper.timeline import print_evidence

    namespace, _, name = args.job.partition("/")
    if not namespace or not name:
        print("podsweeper evidence: give the job as NAMESPACE/JOB", file=sys.stderr)
        return 2
    cluster = connect(load_settings(), args.kubeconfig)
    # The store is named after the job alone; the kind does not matter for reading it.
    found = cluster.read_evidence(JobRef(TRAINING_KINDS[0], namespace, name))
    if found is not None:
        print_evidence(f"{namespace}/{name}", found[0], sys.stdout, as_json=args.json)
        return 0
    # The job may be gone by podsweeper's hand (rule expired-trainjob): its evidence was copied
    # apart from it first, one copy per deleted job of the name (by uid), newest last.
    copies = cluster.read_retained_evidence(namespace, name)
    if not copies:
        print(f"podsweeper evidence: nothing kept for {namespace}/{name}", file=sys.stderr)
        return 1
    for copy in copies:
        if not args.json:
            print(f"(the job of uid {copy.uid} was deleted by podsweeper; copy kept at {copy.at})")
        print_evidence(f"{namespace}/{name}", copy.records, sys.stdout, as_json=args.json)
    return 0


def _record(args: argparse.Namespace) -> int:
    from podsweeper.tools.record import record

    return record(args.kubeconfig, args.namespace, args.out, args.seconds, args.mode)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "evidence": _evidence,
    "replay": _replay,
    "sweep": _sweep,
    "record": _record,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as error:
        print(f"podsweeper: {error}", file=sys.stderr)
        return 2
    except ApiUnavailable as error:
        print(f"podsweeper: Kubernetes API unavailable: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
