"""`python -m tests.support.world --kubeconfig PATH`: the real Kubeflow world for manual runs and scripts.

Starts the control plane, kube-controller-manager, kube-scheduler, kwok with its GPU nodes and
the training operator (with `--trainer` also the JobSet and Kubeflow Trainer v2 controllers,
with `--volcano` Volcano, with `--mpi-operator` the mpi-operator instead of the training
operator's MPIJob);
writes an admin kubeconfig, prints `READY` on stdout and runs until
SIGTERM/SIGINT, then stops every component. Exits non-zero (with a log tail) if one dies.
"""

from __future__ import annotations

import argparse
import sys

from tests.support.controlplane.launcher import ControlPlaneError
from tests.support.harness.processes import StopSignal, ready_until_signalled, stop_on_signals
from tests.support.world.launcher import World, WorldError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.world",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", required=True, help="where to write the admin kubeconfig")
    parser.add_argument("--nodes", type=int, default=3, help="kwok nodes (default 3)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (default 8)")
    parser.add_argument(
        "--no-webhooks", action="store_true", help="run the operator without admission webhooks"
    )
    parser.add_argument(
        "--trainer",
        action="store_true",
        help="also run the JobSet v0.12.0 and Kubeflow Trainer v2.3.0 controllers (TrainJobs run)",
    )
    parser.add_argument(
        "--volcano",
        action="store_true",
        help="also run Volcano v1.10.0 (scheduler, controller manager); the operator gang-schedules with it",
    )
    parser.add_argument(
        "--mpi-operator",
        action="store_true",
        help="serve MPIJob v2beta1 by the mpi-operator v0.8.0 (the training operator then runs no MPIJobs)",
    )
    args = parser.parse_args(argv)

    stop_on_signals()
    try:
        with World(
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            webhooks=not args.no_webhooks,
            trainer=args.trainer,
            volcano=args.volcano,
            mpi_operator=args.mpi_operator,
        ) as world:
            world.control_plane.write_kubeconfig(args.kubeconfig, "admin")
            ready_until_signalled(world.check_alive)
    except StopSignal:
        print("world: stopped", file=sys.stderr, flush=True)
        return 0
    except (WorldError, ControlPlaneError) as e:
        print(f"world: error: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
