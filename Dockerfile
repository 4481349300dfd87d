# syntax=docker/dockerfile:1
# One image for the gpuhealth agent, the aggregator and the on-call CLI (docs/helm.md, "The image"):
#   docker build -t gpuhealth:0.1.0 .
#   docker run --rm gpuhealth:0.1.0 --help
# It ships no NVIDIA driver: the agent gets NVML (libnvidia-ml.so) and /dev/nvidia* from the host through
# the NVIDIA container toolkit (runtime class `nvidia`, NVIDIA_DRIVER_CAPABILITIES=utility).
#
# The base is pinned to one Python release and one Debian release; a release build passes the same tag with
# its digest (docker buildx imagetools inspect python:3.11.11-slim-bookworm), e.g.
#   docker build --build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:<digest> .
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# --- build: the wheels of gpuhealth and of every dependency (binary wheels: no compiler anywhere) ---------
# The simulator (sim/, a distribution of its own: the demo and the test bench) is not part of the image.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuhealth ./gpuhealth
COPY core ./core
COPY agent ./agent
COPY checks ./checks
COPY remediation ./remediation
COPY aggregator ./aggregator
RUN pip wheel --only-binary=:all: --no-binary=gpuhealth --wheel-dir /wheels .

# --- the image: the installed wheels, nothing of the source tree, the build stage or pip's cache ---------
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# journalctl, for the agent's kernel-log follower when it reads the host's journal (kernel_log.source:
# journal). Nothing else from the OS is needed.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends systemd \
    && rm -rf /var/lib/apt/lists/*

RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels gpuhealth

# An unprivileged user by default (the aggregator and the CLI need nothing more). The agent's DaemonSet runs
# as user 0 without capabilities, for its hostPath state directory and the host's kernel log.
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin gpuhealth
USER 10001:10001
WORKDIR /

# 9477: agent /metrics, /healthz, /readyz. 8470: aggregator API, /healthz, /readyz, /metrics.
EXPOSE 9477 8470

ENTRYPOINT ["gpuhealth"]
CMD ["--help"]
