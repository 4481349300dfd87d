# One image for the gpuhealth agent, the aggregator and the on-call CLI:
#   docker build -t gpuhealth:0.1.0 .
#   docker run --rm gpuhealth:0.1.0 --help
# It ships no NVIDIA driver: the agent gets NVML (libnvidia-ml.so) and /dev/nvidia* from the host through
# the NVIDIA container toolkit (runtime class `nvidia`, NVIDIA_DRIVER_CAPABILITIES=utility).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# journalctl, for the agent's kernel-log follower when it reads the host's journal (kernel_log.source:
# journal). Nothing else from the OS is needed.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends systemd \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuhealth ./gpuhealth
COPY agent ./agent
COPY checks ./checks
COPY sim ./sim
COPY aggregator ./aggregator
COPY remediation ./remediation
# Install from the source, then drop the source: the installed package is all that runs.
RUN pip install . && rm -rf /src

# An unprivileged user by default (the aggregator and the CLI need nothing more). The agent's DaemonSet runs
# as user 0 without capabilities, for its hostPath state directory and the host's kernel log.
RUN useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin gpuhealth
USER 10001:10001
WORKDIR /

# 9477: agent /metrics, /healthz, /readyz. 8470: aggregator API.
EXPOSE 9477 8470

ENTRYPOINT ["gpuhealth"]
CMD ["--help"]
