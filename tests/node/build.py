"""What a real node runs, got on first use and cached: the kubelet from the control plane's own Go
module, containerd/runc/CNI plugins/iptables/busybox-static from Debian's packages, and the node's
one image (busybox-static, built with buildah) as an archive containerd imports.

- kubelet: k8s.io/kubernetes/cmd/kubelet at the control plane's version (versions.py), built in
  the scratch copy of the control plane's go.mod that the world's kube-controller-manager and
  kube-scheduler are built in (tests/support/world/build.py), cached by version under
  ~/.cache/podsweeper like every Go binary of the tests.
- Debian bookworm packages, installed with apt-get when a tool is missing (root): containerd 1.6
  (1.6.20), runc 1.1 (1.1.5), containernetworking-plugins 1.1 (1.1.1), iptables 1.8, busybox-static
  1.35. Debian's own versions are what is pinned: the series is checked (REQUIRED_SERIES), the
  exact version installed is reported (package_versions()), since a bookworm point release may
  replace the exact build.
- The image: a scratch image with /bin/busybox and its applets linked, built with buildah (vfs
  storage), pushed to a docker-archive under the cache (keyed by busybox-static's version).

    python -m tests.node.build            # all of it; prints what it has and the time of each step
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from tests.support.controlplane.build import GoBinary, cache_root, kubernetes_version_stamp
from tests.support.controlplane.versions import KUBERNETES_VERSION
from tests.support.harness import locks

KUBELET = GoBinary(
    "kubelet",
    KUBERNETES_VERSION,
    "k8s.io/kubernetes/cmd/kubelet",
    # The world's scratch copy of the control plane's module (tests/support/world/build.py).
    cache_root() / f"world-gomod-kubernetes-{KUBERNETES_VERSION}",
    stamp=kubernetes_version_stamp(KUBERNETES_VERSION),
)

# Debian package -> the executables (or files) it must provide.
PACKAGES = {
    "containerd": ("/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2", "/usr/bin/ctr"),
    "runc": ("/usr/sbin/runc",),
    "containernetworking-plugins": (
        "/usr/lib/cni/bridge",
        "/usr/lib/cni/host-local",
        "/usr/lib/cni/loopback",
    ),
    "iptables": ("/usr/sbin/iptables",),
    # (the doc directory: a dynamic busybox from the `busybox` package also installs /bin/busybox)
    "busybox-static": ("/bin/busybox", "/usr/share/doc/busybox-static"),
    "buildah": ("/usr/bin/buildah",),
}
# The upstream series each package must be of (what this module was proven with).
REQUIRED_SERIES = {"containerd": "1.6.", "runc": "1.1.", "containernetworking-plugins": "1.1."}
CNI_BIN_DIR = Path("/usr/lib/cni")
IMAGE_NAME = "localhost/podsweeper-node:busybox"


class NodeBuildError(RuntimeError):
    """A tool could not be installed or built (message = its output)."""


def _say(log: TextIO, message: str) -> None:
    print(f"node: {message}", file=log, flush=True)


def kubelet(log: TextIO = sys.stderr) -> Path:
    """The kubelet binary, built on first use (cold: minutes; progress on `log`)."""
    from tests.support.world.build import build

    return build(KUBELET, log=log)


def _missing_packages() -> list[str]:
    return [name for name, files in PACKAGES.items() if not all(Path(f).exists() for f in files)]


def ensure_packages(log: TextIO = sys.stderr) -> dict[str, str]:
    """Install the missing Debian packages (apt-get, root); return {package: version}."""
    missing = _missing_packages()
    if missing:
        if os.geteuid() != 0:
            raise NodeBuildError(
                f"{', '.join(missing)} missing and not root: apt-get install -y {' '.join(missing)}"
            )
        with locks.held("apt", log):
            missing = _missing_packages()
            if missing:
                started = time.monotonic()
                _say(log, f"installing {' '.join(missing)} with apt-get (~1 min)...")
                env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
                for cmd in (
                    ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
                ):
                    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
                    if proc.returncode != 0:
                        raise NodeBuildError(
                            f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
                        )
                _say(log, f"installed {' '.join(missing)} in {time.monotonic() - started:.0f}s")
    versions = package_versions()
    for name, series in REQUIRED_SERIES.items():
        upstream = versions[name].split(":")[-1]
        if not upstream.startswith(series):
            raise NodeBuildError(
                f"{name} {versions[name]} is not of the {series}x series this node was proven with"
            )
    return versions


def package_versions() -> dict[str, str]:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *PACKAGES], capture_output=True, text=True
    ).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def _archive(
    image: str, key: str, what: str, fill: Callable[[Callable[..., str], str], None], log: TextIO
) -> Path:
    """A docker-archive of `image` built from scratch with buildah (vfs storage), once per `key`
    (under the cache, behind a lock of its own): `fill(run, container)` puts in what it holds."""
    archive = cache_root() / f"node-image-{key}" / "image.tar"
    if archive.exists():
        return archive
    with locks.held(f"node-image-{key}", log):
        if archive.exists():
            return archive
        started = time.monotonic()
        _say(log, f"building {image} with buildah ({what})...")
        archive.parent.mkdir(parents=True, exist_ok=True)
        buildah = ["buildah", "--storage-driver", "vfs"]

        def run(*args: str) -> str:
            proc = subprocess.run([*buildah, *args], capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise NodeBuildError(
                    f"buildah {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}"
                )
            return proc.stdout.strip()

        container = run("from", "scratch")
        try:
            fill(run, container)
            run("commit", "--quiet", container, image)
        finally:
            subprocess.run([*buildah, "rm", container], capture_output=True, timeout=120)
        partial = archive.with_suffix(f".partial-{os.getpid()}")
        partial.unlink(missing_ok=True)
        run("push", image, f"docker-archive:{partial}:{image}")
        partial.replace(archive)
        _say(log, f"built {archive} in {time.monotonic() - started:.1f}s")
    return archive


def image_archive(log: TextIO = sys.stderr) -> Path:
    """A docker-archive of IMAGE_NAME (busybox-static on scratch), built once per busybox version."""
    version = package_versions().get("busybox-static", "unknown").replace(":", "_")

    def fill(run: Callable[..., str], container: str) -> None:
        with tempfile.TemporaryDirectory(prefix="podsweeper-node-rootfs-") as tmp:
            root = Path(tmp)
            (root / "bin").mkdir()
            shutil.copy2("/bin/busybox", root / "bin" / "busybox")
            applets = subprocess.run(
                ["/bin/busybox", "--list"], capture_output=True, text=True, check=True
            ).stdout
            for applet in applets.split():
                if applet != "busybox":
                    (root / "bin" / applet).symlink_to("busybox")
            (root / "tmp").mkdir()
            (root / "tmp").chmod(0o1777)
            run("copy", container, f"{root}/", "/")
        # The sandbox ("pause") container runs the image's command: sleep until killed.
        run("config", "--env", "PATH=/bin", "--cmd", "/bin/sleep 2147483647", container)

    return _archive(IMAGE_NAME, f"busybox-{version}", f"busybox-static {version}", fill, log)


def binary_image(
    image: str, binary: Path, key: str, log: TextIO = sys.stderr, user: str | None = None
) -> Path:
    """A docker-archive of `image`: scratch with one static binary as /<its name>, its
    entrypoint, run as `user` (numeric, for pods that must run as non-root; None: root); built
    once per `key` (the binary's version and inputs, and the user)."""

    def fill(run: Callable[..., str], container: str) -> None:
        run("copy", container, str(binary), f"/{binary.name}")
        run("config", "--entrypoint", json.dumps([f"/{binary.name}"]), "--cmd", "", container)
        if user:
            run("config", "--user", user, container)

    return _archive(image, f"{key}-u{user}" if user else key, binary.name, fill, log)


def ensure_all(log: TextIO = sys.stderr) -> dict[str, float]:
    """Everything a node needs; the seconds each step took (small when all is there)."""
    times = {}
    for name, step in (("packages", ensure_packages), ("kubelet", kubelet), ("image", image_archive)):
        started = time.monotonic()
        step(log)
        times[name] = round(time.monotonic() - started, 1)
    return times


def main() -> int:
    times = ensure_all()
    print(KUBELET.path)
    for name, version in sorted(package_versions().items()):
        print(f"{name} {version}")
    print(" ".join(f"{k}: {v}s" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
