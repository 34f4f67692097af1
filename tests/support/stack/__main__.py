"""`python -m tests.support.stack --kubeconfig PATH --namespace NS [--world real|players]`: try podsweeper by hand.

Starts the control plane (with the Kubeflow training CRDs and the function's RBAC), the
world, the function under functions-framework (acting only in NS: PODSWEEPER_NAMESPACES) and
Knative's receive adapter watching NS (created if missing), writes an admin kubeconfig
(current namespace NS) to PATH, prints `READY` on stdout, and runs until SIGTERM/SIGINT,
then tears everything down. Progress and where the logs are go to stderr. Exits non-zero if
a part dies.

`--world real` (the default) is tests/support/world: kube-controller-manager, kube-scheduler, kwok GPU
nodes and the Kubeflow training operator v1.9.4 with its webhooks; apply a job and the
operator does the rest:

    python -m tests.support.stack --kubeconfig /tmp/ps.kubeconfig --namespace demo &
    export KUBECONFIG=/tmp/ps.kubeconfig
    kubectl apply -f examples/pytorchjob-seed.yaml
    kubectl get pytorchjobs,pods,services,events -w
    podsweeper record -n demo --out demo.jsonl  # the events the adapter sends, as a file

`--world players` has no controller at all (what the older e2e tests use): create the job's
pods yourself and write statuses through the status subresources (tests/support/stack/players.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tests.support.harness.processes import StopSignal, stop_on_signals


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("PODSWEEPER_"):
        raise argparse.ArgumentTypeError(f"expected PODSWEEPER_NAME=VALUE, got {text!r}")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.stack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", required=True, help="where to write the admin kubeconfig")
    parser.add_argument(
        "--namespace",
        "-n",
        default="default",
        help="namespace the adapter watches and the function acts in (created if missing; default: default)",
    )
    parser.add_argument(
        "--world",
        choices=("real", "players"),
        default="real",
        help="real: the training operator, GC, scheduler and kwok nodes (default); players: none",
    )
    parser.add_argument(
        "--mode",
        choices=("Resource", "Reference"),
        default="Resource",
        help="the adapter's event mode (default: Resource, as shipped)",
    )
    parser.add_argument(
        "--env",
        action="append",
        type=_env_pair,
        default=[],
        metavar="PODSWEEPER_X=V",
        help="extra configuration for the function (repeatable)",
    )
    parser.add_argument(
        "--keep-logs",
        action="store_true",
        help="keep the function's and adapter's logs after stopping (default: removed)",
    )
    args = parser.parse_args(argv)

    stop_on_signals()
    from tests.support.adapter.launcher import AdapterError
    from tests.support.controlplane.launcher import ControlPlane, ControlPlaneError
    from tests.support.stack import Stack, StackError
    from tests.support.world.launcher import WorldError

    stack = None
    try:
        with ControlPlane(log=sys.stderr) as cp:
            stack = Stack(cp, args.namespace, world=args.world, mode=args.mode, function_env=dict(args.env))
            with stack:
                Path(args.kubeconfig).parent.mkdir(parents=True, exist_ok=True)
                cp.write_kubeconfig(args.kubeconfig, "admin", namespace=args.namespace)
                print(
                    f"stack: admin kubeconfig {args.kubeconfig} (namespace {args.namespace}); "
                    f"function {stack.function.url} (log {stack.function.log_path}); "
                    f"adapter log {stack.adapter.log_path}"
                    + (f"; world logs in {stack.world.workdir}" if stack.world is not None else ""),
                    file=sys.stderr,
                    flush=True,
                )
                print(
                    f"stack: a backstop sweep by hand: curl -X POST {stack.function.url} "
                    "-H 'Ce-Specversion: 1.0' -H 'Ce-Type: dev.knative.sources.ping' "
                    "-H 'Ce-Source: by-hand' -H 'Ce-Id: 1' -H 'Content-Type: application/json' -d '{}'",
                    file=sys.stderr,
                    flush=True,
                )
                print("READY", flush=True)
                while True:
                    stack.check_alive()
                    time.sleep(0.5)
    except StopSignal:
        print("stack: stopped", file=sys.stderr, flush=True)
        if stack is not None and not args.keep_logs:
            stack.cleanup()
        return 0
    except (ControlPlaneError, StackError, AdapterError, WorldError) as error:
        print(f"stack: error: {error}", file=sys.stderr, flush=True)
        if stack is not None:
            print(f"stack: logs kept in {stack.workdir}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
