# podsweeper: the function served by functions-framework, as a small non-root image.
#
#   docker build -t podsweeper .                 # the pinned python:3.11-slim-bookworm base
#   buildah bud --build-arg BASE_IMAGE=... .     # any Debian-like base with python3 + python3-venv
#
# Supply chain (docs/deploy.md, "Image"):
#   - the base is pinned by digest (refresh: `docker buildx imagetools inspect
#     python:3.11-slim-bookworm` prints the index digest);
#   - every dependency is installed from requirements.lock with `--require-hashes` (pinned
#     versions, sha256 of every file); the build backend from requirements-build.lock the same way;
#   - the final image is FROM scratch: the interpreter, its standard library, the shared libraries
#     they load and /opt/venv (docker/rootfs.py assembles them). No shell, no pip, no package
#     manager, no coreutils: its CMD is all it can run.
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# --- builder: podsweeper's own wheel, built offline with the hash-locked build backend
FROM ${BASE_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/pip
WORKDIR /src
# .dockerignore lets in only pyproject.toml, README.md, the two lock files, docker/ and
# function/ (the package and main.py).
COPY requirements-build.lock ./
RUN /opt/pip/bin/pip install --require-hashes --no-deps -r requirements-build.lock
COPY . .
RUN /opt/pip/bin/pip wheel --no-deps --no-build-isolation --no-index --wheel-dir /wheels .

# --- venv: the locked dependencies (every file's hash checked), then podsweeper's wheel alone,
# into a venv without pip (bytecode precompiled: the root filesystem is read-only at run time)
FROM ${BASE_IMAGE} AS venv
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements.lock /src/requirements.lock
COPY --from=builder /wheels /wheels
# Recent kubernetes releases (37.x; not 33.x) also ship kubernetes/aio, an asyncio copy of
# the whole generated client (~70 MB with bytecode, a fifth of the image) that podsweeper
# never imports.
RUN python3 -m venv /opt/pip \
    && python3 -m venv --without-pip /opt/venv \
    && /opt/pip/bin/pip --python /opt/venv/bin/python install --require-hashes --no-deps -r /src/requirements.lock \
    && /opt/pip/bin/pip --python /opt/venv/bin/python install --no-index --no-deps --find-links /wheels podsweeper \
    && /opt/pip/bin/pip --python /opt/venv/bin/python check \
    && rm -rf /opt/venv/lib/python3*/site-packages/kubernetes/aio

# --- rootfs: what the final image holds, and nothing else
FROM venv AS rootfs
COPY docker/rootfs.py /src/rootfs.py
RUN python3 /src/rootfs.py /opt/venv /rootfs

# --- final: scratch plus that filesystem
# MALLOC_ARENA_MAX: glibc gives each of gunicorn's threads a malloc arena of its own (up to
# 8 per core), and each keeps the freed pages of the largest bodies it once read; two arenas
# bound that (docs/deploy.md, "Memory").
FROM scratch
COPY --from=rootfs /rootfs /
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    LANG=C.UTF-8 \
    PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin \
    PORT=8080
WORKDIR /app
# The functions-framework entry is not part of the wheel: it sits where the serve command
# (README.md, tests/support/harness/served.py) names it, relative to the working directory.
COPY function/main.py function/main.py
USER 65532:65532
EXPOSE 8080
# functions-framework reads PORT (Knative sets it; 8080 otherwise) and HOST (default 0.0.0.0).
# Exec form, no shell: the image has none.
CMD ["functions-framework", "--source", "function/main.py", "--target", "handle", "--signature-type", "http"]
