"""`python -m tests.support.controlplane --kubeconfig PATH`: a control plane for manual runs and scripts.

Prints progress to stderr and `READY` on its own line on stdout once the API server
answers and the CRDs and RBAC are installed, then runs until SIGTERM/SIGINT and stops
both components. Exits non-zero (with the component's log tail) if one of them dies.
"""

from __future__ import annotations

import argparse
import sys

from tests.support.controlplane.launcher import USERS, ControlPlane, ControlPlaneError
from tests.support.harness.processes import StopSignal, ready_until_signalled, stop_on_signals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.controlplane",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", required=True, help="where to write the kubeconfig")
    parser.add_argument(
        "--user",
        default="admin",
        choices=sorted(USERS),
        help="identity of that kubeconfig (default: admin, in system:masters)",
    )
    parser.add_argument(
        "--function-kubeconfig", help="also write a kubeconfig for the function's ServiceAccount user here"
    )
    parser.add_argument("--no-crds", action="store_true", help="skip the Kubeflow training CRDs")
    parser.add_argument("--no-rbac", action="store_true", help="skip knative/function/rbac.yaml")
    args = parser.parse_args(argv)

    stop_on_signals()
    try:
        with ControlPlane(install_crds=not args.no_crds, install_rbac=not args.no_rbac) as cp:
            cp.write_kubeconfig(args.kubeconfig, args.user)
            if args.function_kubeconfig:
                cp.write_kubeconfig(args.function_kubeconfig, "function")
            ready_until_signalled(cp.check_alive)
    except StopSignal:
        print("control plane: stopped", file=sys.stderr, flush=True)
        return 0
    except ControlPlaneError as e:
        print(f"control plane: error: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
