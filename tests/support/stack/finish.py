"""Stopping the stacks a test started (the `make_stack` fixture of tests/controllers/conftest.py),
kept apart from the fixture so the unit rung can check it without a control plane."""

from __future__ import annotations

import contextlib
import sys

import pytest


def finish_stacks(stacks, failed: bool, log=sys.stderr) -> None:
    """Stop every stack, whatever happens to the others; then fail if a part of one died
    during the test (a crash after the last assertion must not pass unnoticed). Logs are
    printed for a failed test or a dead part, and removed otherwise."""
    died: list[str] = []
    for stack in stacks:
        try:
            stack.check_alive()
        except Exception as error:  # noqa: BLE001 - reported below, after every stack is stopped
            died.append(f"{stack.namespace}: {error}")
        try:
            stack.stop()
        except Exception as error:  # noqa: BLE001 - the other stacks must still stop
            died.append(f"{stack.namespace}: did not stop: {error}")
        if stack.world_kind == "real":
            _drop_namespace(stack)
        if failed or died:
            _print_logs(stack, log)
        else:
            stack.cleanup()
    if died:
        pytest.fail("part of the stack died during the test:\n" + "\n".join(died), pytrace=False)


def _drop_namespace(stack) -> None:
    """A real world's namespaces the stack made go with everything in them (its namespace
    controller runs); one it found (shared by a module's stacks) stays."""
    with contextlib.suppress(Exception):
        api = stack.cp.api_client("admin")
        try:
            from kubernetes import client

            for namespace in stack.made_namespaces:
                client.CoreV1Api(api).delete_namespace(namespace)
        finally:
            api.close()


def _print_logs(stack, log) -> None:
    for function in getattr(stack, "functions", None) or [stack.function]:
        print(f"\n--- function log ({function.log_path if function else '-'}):", file=log)
        if function is not None:
            print("\n".join(function.log_path.read_text(errors="replace").splitlines()[-60:]), file=log)
    if stack.adapter is not None:
        print(f"--- adapter log ({stack.adapter.log_path}):\n{stack.adapter.tail(40)}", file=log)
