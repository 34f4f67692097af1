# podsweeper: the function served by functions-framework, as a small non-root image.
#
#   docker build -t podsweeper .                 # python:3.11-slim base
#   buildah bud --build-arg BASE_IMAGE=... .     # any Debian-like base with python3 + python3-venv
#
# The base only needs `python3` with the venv module: pip is only ever used from a venv made in
# the build stages, and the final image gets no pip, no wheels and no build tools.
ARG BASE_IMAGE=python:3.11-slim

# --- builder: wheels for podsweeper and every dependency (no compiler needed: all have wheels)
FROM ${BASE_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/pip
WORKDIR /src
# .dockerignore lets in only pyproject.toml, README.md and function/ (the package and main.py).
COPY . .
RUN /opt/pip/bin/pip wheel --wheel-dir /wheels .

# --- venv: install from those wheels only, into a venv without pip (bytecode precompiled:
# the root filesystem is read-only at run time)
FROM ${BASE_IMAGE} AS venv
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=builder /wheels /wheels
# Recent kubernetes releases (37.x; not 33.x) also ship kubernetes/aio, an asyncio copy of
# the whole generated client (~70 MB with bytecode, a fifth of the image) that podsweeper
# never imports.
RUN python3 -m venv /opt/pip \
    && python3 -m venv --without-pip /opt/venv \
    && /opt/pip/bin/pip --python /opt/venv/bin/python install --no-index --find-links /wheels podsweeper \
    && rm -rf /opt/venv/lib/python3*/site-packages/kubernetes/aio

# --- final: the base plus /opt/venv
# MALLOC_ARENA_MAX: glibc gives each of gunicorn's threads a malloc arena of its own (up to
# 8 per core), and each keeps the freed pages of the largest bodies it once read; two arenas
# bound that (docs/deploy.md, "Memory").
FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    PATH=/opt/venv/bin:$PATH \
    PORT=8080
COPY --from=venv /opt/venv /opt/venv
WORKDIR /app
# The functions-framework entry is not part of the wheel: it sits where the serve command
# (README.md, tests/support/harness/served.py) names it, relative to the working directory.
COPY function/main.py function/main.py
USER 65532:65532
EXPOSE 8080
# functions-framework reads PORT (Knative sets it; 8080 otherwise) and HOST (default 0.0.0.0).
CMD ["functions-framework", "--source", "function/main.py", "--target", "handle", "--signature-type", "http"]
