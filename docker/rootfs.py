"""Assemble the final image's whole filesystem: the Python runtime, the venv, nothing else.

Run by the base image's own python3 in a build stage (Dockerfile); the final stage is
`FROM scratch` plus what this writes to ROOT. What goes in:

- the interpreter the venv points at (the chain of symlinks from /opt/venv/bin/python to the
  real file, each link kept as a link) and its standard library, without site-packages
  (the base's pip and setuptools live there), ensurepip (a bundled pip wheel) and the
  modules nothing imports at run time (test, idlelib, tkinter, turtledemo, lib2to3);
- every shared library the interpreter, the standard library's and the venv's extension
  modules load (as `ldd` resolves them, with the dynamic loader), libgcc_s (glibc loads it
  with dlopen when a thread exits) and /etc/ld.so.cache (libraries outside /lib and /usr/lib,
  e.g. a /usr/local build's libpython, are found through it);
- the venv as it is, /etc/passwd and /etc/group naming root and nonroot (65532), an empty
  /tmp (mode 1777) and the CA bundle if the base has one.

No shell, no coreutils, no pip: the image runs its CMD (functions-framework, a script whose
`#!` line names the venv's python) and nothing else. Stdlib only; no argument parsing beyond
the two paths.

    python3 rootfs.py /opt/venv /rootfs
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

SKIPPED_STDLIB = {
    "site-packages",
    "dist-packages",
    "ensurepip",
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "lib2to3",
}
LDD_PATH = re.compile(r"(/\S+)")
NONROOT = 65532
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt",)


def place(path: str, root: Path) -> None:
    """Copy one path into root at the same place; a symlink (of the path or of a directory on
    the way) becomes the same link, made relative so that it resolves inside root."""
    path = os.path.normpath(path)
    if path == "/":
        return
    place(os.path.dirname(path), root)
    target = root / path.lstrip("/")
    if os.path.lexists(target):
        return
    if os.path.islink(path):
        pointed = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
        target.symlink_to(os.path.relpath(pointed, os.path.dirname(path)))
        place(pointed, root)
    elif os.path.isdir(path):
        target.mkdir()
        shutil.copystat(path, target)
    else:
        shutil.copy2(path, target)


def libraries(files: list[str]) -> set[str]:
    """The shared libraries these ELF files load, as ldd resolves them (the loader included)."""
    found: set[str] = set()
    for file in files:
        proc = subprocess.run(["ldd", file], capture_output=True, text=True, check=False)
        if proc.returncode != 0:  # not dynamic (a static interpreter, a pure data file)
            continue
        for line in proc.stdout.splitlines():
            if "not found" in line:
                raise SystemExit(f"{file}: {line.strip()}")
            match = LDD_PATH.search(line.split("=>")[-1])
            if match:
                found.add(match.group(1))
    return found


def libgcc_s() -> list[str]:
    proc = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False)
    return [line.split("=>")[-1].strip() for line in proc.stdout.splitlines() if "libgcc_s.so.1 " in line][:1]


def stdlib_files(stdlib: str) -> list[str]:
    kept = []
    for directory, subdirs, names in os.walk(stdlib):
        if directory == stdlib:
            subdirs[:] = [d for d in subdirs if d not in SKIPPED_STDLIB]
        kept += [os.path.join(directory, name) for name in names]
    return kept


def main(venv: str, root_dir: str) -> int:
    root = Path(root_dir)
    root.mkdir(parents=True, exist_ok=True)
    interpreter = os.path.join(venv, "bin", "python")
    chain = []
    link = interpreter
    while os.path.islink(link):  # venv/bin/python -> python3 -> /usr/bin/python3 -> python3.11
        link = os.path.normpath(os.path.join(os.path.dirname(link), os.readlink(link)))
        chain.append(link)
    stdlib = sysconfig.get_paths()["stdlib"]
    files = stdlib_files(stdlib)
    venv_files = [str(p) for p in Path(venv).rglob("*") if p.is_file() and not p.is_symlink()]
    elves = [link] + [f for f in files + venv_files if ".so" in os.path.basename(f)]
    # The venv first, as it is (its bin/python* stay links to the interpreter); then the rest.
    shutil.copytree(venv, root / venv.lstrip("/"), symlinks=True, dirs_exist_ok=True)
    for path in [*chain, *files, *sorted(libraries(elves)), *libgcc_s(), "/etc/ld.so.cache"]:
        place(path, root)
    for bundle in CA_BUNDLES:
        if os.path.exists(bundle):
            place(bundle, root)
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(
        f"root:x:0:0:root:/root:/nonexistent\nnonroot:x:{NONROOT}:{NONROOT}::/tmp:/nonexistent\n"
    )
    (etc / "group").write_text(f"root:x:0:\nnonroot:x:{NONROOT}:\n")
    tmp = root / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)
    for shell in ("bin/sh", "bin/bash", "usr/bin/sh", "usr/bin/bash", "usr/bin/pip", "usr/local/bin/pip"):
        if os.path.lexists(root / shell):
            raise SystemExit(f"{shell} ended up in the runtime filesystem")
    print(f"{root}: {len(files)} stdlib files, {len(elves)} ELF files checked, interpreter {link}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
