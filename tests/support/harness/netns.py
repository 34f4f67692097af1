"""A network namespace of our own for a component that binds a fixed port, so several run at
once on one machine: Knative Serving's components (:8080, :8008 each), the mpi-operator's
health server (:8080, not a flag). Only loopback inside; `forward_out` lets it reach the
control plane on the machine's loopback, `forward_in` lets the tests reach it. No address
outside this machine is ever a destination. Root is needed (unshare --net)."""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import threading
from pathlib import Path

from tests.support.harness.ports import free_port
from tests.support.harness.processes import Process

CLONE_NEWNET = 0x40000000


class NetNamespaceError(RuntimeError):
    """The namespace could not be made (a tool missing, not root); carries the log tail."""


def _setns(pid: int) -> None:
    """Move the calling *thread* into the network namespace of process `pid`."""
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the network namespace of {pid}")
    finally:
        os.close(fd)


def _in_thread(fn):
    """Run fn() in a short-lived thread and return its result (or raise its exception): a thread
    that entered another network namespace dies with it, so no thread of ours is left there."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


class _Forwarder:
    """TCP from a listening socket (made in one namespace) to an address (dialled in another)."""

    def __init__(self, listener: socket.socket, dial):
        self.listener = listener
        self.dial = dial
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.settimeout(None)
            try:
                upstream = self.dial()
            except OSError:
                conn.close()
                continue
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.closed = True
        try:
            self.listener.close()
        except OSError:
            pass


def _dial(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.settimeout(None)  # a timeout would cut idle (watch, HTTP/2) connections after 10 s
    return s


def _listen(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(64)
    return s


class NetNamespace:
    """A network namespace with only loopback, held open by a sleeping `unshare --net`.

    `address` is added to its loopback: the component's pod IP (the autoscaler publishes its
    POD_IP in an EndpointSlice, which refuses loopback addresses). `run()` starts a command
    inside it (nsenter); `forward_out(port)` makes 127.0.0.1:port inside reach 127.0.0.1:port
    outside; `forward_in(port)` makes 127.0.0.1:<free> outside reach 127.0.0.1:port inside and
    returns the outside port."""

    def __init__(self, name: str, address: str, workdir: Path, error: type[Exception] = NetNamespaceError):
        for tool in ("unshare", "nsenter", "ip"):
            if shutil.which(tool) is None:
                raise error(f"{tool} is not on PATH: needed for {name}'s network namespace")
        self.name = name
        self.address = address
        self.forwarders: list[_Forwarder] = []
        self.holder = Process(
            f"the network namespace of {name} (unshare --net; root needed)",
            workdir / f"netns-{name}.log",
            error=error,
            grace=2.0,
        ).launch(
            [
                "unshare",
                "--net",
                "--",
                "sh",
                "-c",
                f"ip link set lo up && ip addr add {address}/32 dev lo && echo up && exec sleep infinity",
            ]
        )
        try:  # its ready line
            self.holder.wait("say up", lambda: "up" in self.holder.text().splitlines(), 30.0, interval=0.05)
        except BaseException:
            self.holder.stop()
            raise

    @property
    def pid(self) -> int:
        assert self.holder.proc is not None
        return self.holder.proc.pid

    @property
    def path(self) -> str:
        return f"/proc/{self.pid}/ns/net"

    def forward_out(self, port: int) -> None:
        def listen_inside():
            _setns(self.pid)
            return _listen(port)

        listener = _in_thread(listen_inside)
        self.forwarders.append(_Forwarder(listener, lambda: _dial(port)))

    def forward_in(self, port: int) -> int:
        outside = free_port()
        pid = self.pid

        def dial_inside():
            def connect():
                _setns(pid)
                return _dial(port)

            return _in_thread(connect)

        self.forwarders.append(_Forwarder(_listen(outside), dial_inside))
        return outside

    def close(self) -> None:
        for f in self.forwarders:
            f.close()
        self.forwarders.clear()
        self.holder.stop()
