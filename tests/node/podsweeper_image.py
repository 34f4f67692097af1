"""podsweeper's own image for the real node: the repository's Dockerfile built with buildah
(tests/delivery/image.py: vfs storage, chroot isolation, the local Debian base), pushed to a
docker-archive under the cache and imported into the node's containerd (`ctr -n k8s.io images
import`), as tests/node/build.py does with the node's busybox image.

The archive is keyed by what the build reads: the Dockerfile, .dockerignore, the files the
build context lets in (pyproject.toml, README.md, the two lock files, docker/, function/ without
caches) and the base image's id. A change to any of them builds again (cold: pip installs the
hash-locked dependencies from the package index, the one network use of the build); otherwise
the archive is reused (warm).

    python -m tests.node.podsweeper_image     # build if needed; prints the archive and the time
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tests.support.controlplane.build import cache_root
from tests.support.harness import locks

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/podsweeper:node"
# What .dockerignore lets into the build context (the Dockerfile's COPY sources).
CONTEXT = (
    "pyproject.toml",
    "README.md",
    "requirements.lock",
    "requirements-build.lock",
    "docker",
    "function",
)


@dataclass
class Archive:
    path: Path
    built: bool  # False: the cached archive was reused
    seconds: float  # the build and push, or the cache look-up
    size_mb: float


def _context_digest(base_id: str) -> str:
    digest = hashlib.sha256(base_id.encode())
    files = [REPO / "Dockerfile", REPO / ".dockerignore"]
    for entry in CONTEXT:
        path = REPO / entry
        files += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for path in files:
        rel = path.relative_to(REPO)
        if (
            "__pycache__" in rel.parts
            or rel.suffix == ".pyc"
            or any(p.endswith(".egg-info") for p in rel.parts)
        ):
            continue
        digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _base_id() -> str:
    from tests.delivery.image import BASE_IMAGE, BUILDAH, ensure_base_image

    ensure_base_image()
    out = subprocess.run(
        [*BUILDAH, "inspect", "--type", "image", "--format", "{{.FromImageID}}", BASE_IMAGE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    return out


def archive(log: TextIO = sys.stderr) -> Archive:
    """The image's docker-archive: the cached one, or built now from the Dockerfile."""
    from tests.delivery.image import BUILDAH, build_image, run

    started = time.monotonic()
    key = _context_digest(_base_id())
    path = cache_root() / f"node-image-podsweeper-{key}" / "image.tar"
    if path.exists():
        return Archive(path, False, time.monotonic() - started, path.stat().st_size / 1e6)
    with locks.held("node-image-podsweeper", log):
        if path.exists():
            return Archive(path, False, time.monotonic() - started, path.stat().st_size / 1e6)
        print(
            f"node: building {IMAGE} from the Dockerfile with buildah (context {key})...",
            file=log,
            flush=True,
        )
        build_image(IMAGE, context=REPO)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".partial-{os.getpid()}")
        partial.unlink(missing_ok=True)
        run([*BUILDAH, "push", IMAGE, f"docker-archive:{partial}:{IMAGE}"], timeout=600)
        partial.replace(path)
        seconds = time.monotonic() - started
        print(f"node: built {path} in {seconds:.1f}s", file=log, flush=True)
    return Archive(path, True, seconds, path.stat().st_size / 1e6)


def image_config() -> dict:
    """The built image's OCI config (User, Env, Cmd, WorkingDir), from buildah's storage."""
    from tests.delivery.image import BUILDAH, run

    info = json.loads(run([*BUILDAH, "inspect", "--type", "image", IMAGE], timeout=60).stdout)
    return info["OCIv1"]["config"]


if __name__ == "__main__":
    a = archive()
    print(f"{a.path} ({a.size_mb:.0f} MB): {'built' if a.built else 'cached'} in {a.seconds:.1f}s")
