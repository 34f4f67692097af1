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

`--world trainer` adds JobSet and Kubeflow Trainer v2 (TrainJobs), `--world volcano` runs the
operator gang-scheduling with Volcano, `--world mpi-operator` serves MPIJob v2beta1 from the
standalone mpi-operator instead of the training operator's v1: the world profiles the tests
use (tests/support/world/README.md). `--world node` runs the real world on one real node
instead of kwok's (tests/node, docs/node.md; root): the kubelet, containerd and runc run the
pods for real, on a control plane of the node's own; a pod's image is the node's busybox
(`image: localhost/podsweeper-node:busybox`, imagePullPolicy Never; nothing is pulled).

`--world players` has no controller at all (what the older e2e tests use): create the job's
pods yourself and write statuses through the status subresources (tests/support/stack/players.py).

`--eventing` installs podsweeper as a user does instead: Knative Eventing's real controller
reconciles the kustomize render of `--install` (default knative/overlays/without-serving,
then knative/overlays/live-without-serving with `--live`), and the function, the receive
adapter and the PingSource dispatcher run as the pods those controllers generated
(tests/support/knative). The function then acts in every namespace the install allows:

    python -m tests.support.stack --kubeconfig /tmp/ps.kubeconfig --eventing --live &
    kubectl -n podsweeper get apiserversource,pingsource,deployments,pods
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from tests.support.harness.processes import StopSignal, ready_until_signalled, stop_on_signals


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
        choices=("real", "trainer", "volcano", "mpi-operator", "node", "players"),
        default="real",
        help="real: the training operator, GC, scheduler and kwok nodes (default); trainer, volcano, "
        "mpi-operator: real plus that profile; node: real on one real node (root); players: no controller",
    )
    parser.add_argument(
        "--eventing",
        action="store_true",
        help="install as a user does, reconciled by Knative Eventing's real controller (not with players)",
    )
    parser.add_argument(
        "--install",
        default="knative/overlays/without-serving",
        help="with --eventing: the kustomization to apply (default: knative/overlays/without-serving)",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="with --eventing: apply knative/overlays/live-without-serving too (the function deletes)",
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

    if args.eventing and args.world == "players":
        parser.error("--eventing needs a world with a controller manager (not players)")
    if args.eventing:
        return _eventing(args)
    stack = None
    try:
        with contextlib.ExitStack() as profile:
            if args.world == "node":
                # The real node's world brings its own control plane (it trusts the node's CA).
                world = profile.enter_context(_node_world())
                cp = world.control_plane
            else:
                cp = profile.enter_context(ControlPlane(log=sys.stderr))
                # real and players: the stack makes its own; a profile's world is ours to stop.
                world = (
                    args.world
                    if args.world in ("real", "players")
                    else profile.enter_context(_world(cp, args.world))
                )
            stack = Stack(cp, args.namespace, world=world, mode=args.mode, function_env=dict(args.env))
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
                ready_until_signalled(stack.check_alive)
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


def _node_world():
    """tests/node's NodeWorld: one real node (kubelet, containerd, runc; root) instead of kwok's."""
    from tests.node.world import NodeWorld

    return NodeWorld(log=sys.stderr)


def _world(cp, profile: str):
    from tests.support.world.launcher import World

    options = {
        "trainer": {"trainer": True},
        "volcano": {"volcano": True},
        "mpi-operator": {"mpi_operator": True},
    }
    return World(cp, log=sys.stderr, **options.get(profile, {}))


def _eventing(args) -> int:
    """--eventing: the world, Eventing's controller, and the install applied as a user would."""
    from tests.support.controlplane.launcher import ControlPlane, ControlPlaneError
    from tests.support.knative.eventing import Eventing, EventingError
    from tests.support.kubectl import ApplyError
    from tests.support.tools.kustomize import render
    from tests.support.world.launcher import WorldError

    root = Path(__file__).resolve().parents[3]
    try:
        with ControlPlane(log=sys.stderr) as cp, _world(cp, args.world) as world, Eventing(cp) as eventing:
            eventing.install(render(root / args.install))
            if args.live:
                eventing.install(render(root / "knative" / "overlays" / "live-without-serving"))
            Path(args.kubeconfig).parent.mkdir(parents=True, exist_ok=True)
            cp.write_kubeconfig(args.kubeconfig, "admin", namespace="podsweeper")
            print(
                f"stack: admin kubeconfig {args.kubeconfig}; {args.install} applied"
                + (" and live" if args.live else " (dry-run)")
                + f"; controller log {eventing.log_path}; pods' logs under {eventing.kubelet.workdir}",
                file=sys.stderr,
                flush=True,
            )
            ready_until_signalled(eventing.check_alive, world.check_alive)
    except StopSignal:
        print("stack: stopped", file=sys.stderr, flush=True)
        return 0
    except (ControlPlaneError, EventingError, ApplyError, WorldError) as error:
        print(f"stack: error: {error}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
