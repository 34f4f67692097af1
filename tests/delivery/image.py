"""Build and run the Dockerfile without Docker: buildah (vfs storage, chroot isolation).

No container registry is reachable here, so the base image is made locally: debootstrap a
minimal Debian bookworm with python3 + python3-venv and import it as
``localhost/debian-python:bookworm`` (cached in buildah's storage; ~45 s the first time).

    python -m tests.delivery.image base            # make the base image if missing
    python -m tests.delivery.image build [TAG]     # build the Dockerfile on it (default localhost/podsweeper:dev)

Everything needs root (apt-get, debootstrap, buildah's vfs storage); tools missing on a fresh
machine are installed with apt-get.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.harness import locks

REPO = Path(__file__).resolve().parents[2]
BUILDAH = ["buildah", "--storage-driver", "vfs"]
BASE_IMAGE = "localhost/debian-python:bookworm"
DEBIAN_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


class ImageError(RuntimeError):
    """A tool could not be installed or a build step failed (message = its output)."""


def run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if proc.returncode != 0:
        raise ImageError(
            f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}"
        )
    return proc


def ensure_tools(log=sys.stderr) -> None:
    """buildah and debootstrap, installed from Debian's packages when missing."""
    missing = [
        tool
        for tool in ("buildah", "debootstrap")
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()
    ]
    if not missing:
        return
    if os.geteuid() != 0:
        raise ImageError(f"{', '.join(missing)} missing and not root: apt-get install -y buildah debootstrap")
    with locks.held("apt", log):  # dpkg takes one apt-get at a time
        print(f"installing {' '.join(missing)} with apt-get...", file=log, flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update", "-q"], timeout=600, env=env)
        run(["apt-get", "install", "-y", "-q", "buildah", "debootstrap"], timeout=900, env=env)


def debian_mirror() -> str:
    """The Debian archive this machine's apt uses for the main suite (not -security)."""
    uris: list[str] = []
    sources = Path("/etc/apt/sources.list.d")
    files = (
        [Path("/etc/apt/sources.list")] + sorted(sources.glob("*.list")) + sorted(sources.glob("*.sources"))
    )
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":  # deb822: "URIs: ..." per stanza
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if (
                    "deb" in fields.get("Types", "").split()
                    and DEBIAN_SUITE in fields.get("Suites", "").split()
                ):
                    uris += fields.get("URIs", "").split()
        else:
            for line in text.splitlines():
                parts = line.split("#", 1)[0].split()
                if len(parts) >= 3 and parts[0] == "deb":
                    uri_index = 2 if parts[1].startswith("[") else 1
                    if parts[uri_index + 1 : uri_index + 2] == [DEBIAN_SUITE]:
                        uris.append(parts[uri_index])
    for uri in uris:
        if "security" not in uri:
            return uri
    return DEFAULT_MIRROR


def image_exists(tag: str) -> bool:
    proc = subprocess.run(
        BUILDAH + ["inspect", "--type", "image", tag], capture_output=True, text=True, timeout=60
    )
    return proc.returncode == 0


def ensure_base_image(tag: str = BASE_IMAGE, log=sys.stderr) -> str:
    """A minimal Debian bookworm with python3 + python3-venv, imported into buildah's storage."""
    ensure_tools(log)
    if image_exists(tag):
        return tag
    with locks.held("base-image", log):
        if image_exists(tag):  # another process made it while this one waited
            return tag
        return _make_base_image(tag, log)


def _make_base_image(tag: str, log) -> str:
    mirror = debian_mirror()
    print(f"debootstrap {DEBIAN_SUITE} from {mirror} for {tag} (~1 min)...", file=log, flush=True)
    with tempfile.TemporaryDirectory(prefix="podsweeper-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv",
                DEBIAN_SUITE,
                str(rootfs),
                mirror,
            ],
            timeout=900,
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        container = run(BUILDAH + ["from", "scratch"], timeout=60).stdout.strip()
        try:
            mountpoint = run(BUILDAH + ["mount", container], timeout=60).stdout.strip()
            # tar | tar keeps owners, modes and device nodes as debootstrap made them.
            subprocess.run(
                f"tar -C {rootfs} -cf - . | tar -C {mountpoint} -xf -", shell=True, check=True, timeout=600
            )
            run(BUILDAH + ["umount", container], timeout=60)
            run(
                BUILDAH
                + [
                    "config",
                    "--env",
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "--env",
                    "LANG=C.UTF-8",
                    "--cmd",
                    "/bin/bash",
                    container,
                ],
                timeout=60,
            )
            run(BUILDAH + ["commit", "--quiet", container, tag], timeout=600)
        finally:
            subprocess.run(BUILDAH + ["rm", container], capture_output=True, timeout=120)
    return tag


@contextmanager
def pip_trust_mounts():
    """Build-time (not committed) volumes that make pip in the build trust what the host trusts.

    Where outbound TLS is intercepted, the host's CA bundle has the extra root and pip inside a
    fresh base image would fail with CERTIFICATE_VERIFY_FAILED. The Dockerfile stays free of
    any of this: only `buildah bud -v` mounts the host bundle and a pip.conf pointing at it.
    """
    if not HOST_CA_BUNDLE.exists():
        yield []
        return
    with tempfile.TemporaryDirectory(prefix="podsweeper-pip-") as tmp:
        conf = Path(tmp) / "pip.conf"
        lines = ["[global]", "cert = /run/podsweeper-build/ca-certificates.crt"]
        if os.environ.get("PIP_INDEX_URL"):
            lines.append(f"index-url = {os.environ['PIP_INDEX_URL']}")
        conf.write_text("\n".join(lines) + "\n")
        conf.chmod(0o644)
        yield [
            "-v",
            f"{HOST_CA_BUNDLE}:/run/podsweeper-build/ca-certificates.crt:ro",
            "-v",
            f"{conf}:/etc/pip.conf:ro",
        ]


@dataclass
class Built:
    tag: str
    seconds: float
    size_bytes: int
    config: dict  # the OCI image config ("User", "Cmd", "Env", ...)

    @property
    def size_mb(self) -> float:
        return self.size_bytes / 1e6


def build_image(tag: str, base_image: str = BASE_IMAGE, context: Path = REPO, timeout: float = 1200) -> Built:
    """`buildah bud` the Dockerfile in context; the image's size and config."""
    started = time.monotonic()
    with pip_trust_mounts() as mounts:
        run(
            BUILDAH
            + [
                "bud",
                "--isolation",
                "chroot",
                "--no-cache",
                "--force-rm",
                "--build-arg",
                f"BASE_IMAGE={base_image}",
                *mounts,
                "-t",
                tag,
                str(context),
            ],
            timeout=timeout,
        )
    seconds = time.monotonic() - started
    info = json.loads(run(BUILDAH + ["inspect", "--type", "image", tag], timeout=60).stdout)
    return Built(tag, seconds, image_size(tag), info["OCIv1"]["config"])


def image_size(tag: str) -> int:
    """Uncompressed size in bytes: the sum of the image's layer tarballs (its manifest)."""
    info = json.loads(run(BUILDAH + ["inspect", "--type", "image", tag], timeout=60).stdout)
    return sum(layer["size"] for layer in json.loads(info["Manifest"])["layers"])


def remove_image(tag: str) -> None:
    subprocess.run(BUILDAH + ["rmi", "--force", tag], capture_output=True, timeout=300)


@contextmanager
def working_container(image: str):
    """`buildah from IMAGE`, removed afterwards; yields the container's name."""
    name = run(BUILDAH + ["from", image], timeout=300).stdout.strip()
    try:
        yield name
    finally:
        subprocess.run(BUILDAH + ["rm", name], capture_output=True, timeout=300)


@contextmanager
def mounted(container: str):
    """The container's root filesystem, mounted on the host for inspection."""
    path = Path(run(BUILDAH + ["mount", container], timeout=60).stdout.strip())
    try:
        yield path
    finally:
        subprocess.run(BUILDAH + ["umount", container], capture_output=True, timeout=60)


def run_argv(container: str, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    """The `buildah run` command line for argv inside container (as the image's USER)."""
    cmd = BUILDAH + ["run", "--isolation", "chroot"]
    for key, value in (env or {}).items():
        cmd += ["--env", f"{key}={value}"]
    return cmd + [container, "--"] + list(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["base"]:
        print(ensure_base_image())
        return 0
    if argv[:1] == ["build"]:
        ensure_base_image()
        built = build_image(argv[1] if len(argv) > 1 else "localhost/podsweeper:dev")
        print(f"{built.tag}: {built.size_mb:.0f} MB, built in {built.seconds:.0f} s")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
