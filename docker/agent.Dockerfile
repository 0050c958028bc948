# syntax=docker/dockerfile:1
# The GPU host agent: `vramdoc agent` on port 9400 (GET /v1/snapshot behind a bearer token).
# No CUDA image and no toolkit: NVML (libnvidia-ml.so.1) comes from the host driver, which the NVIDIA
# container runtime mounts when NVIDIA_DRIVER_CAPABILITIES includes `utility`.
# Build from the repository root:  docker build -f docker/agent.Dockerfile -t vramdoc/agent:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: a virtual environment with only the agent's dependencies and the project itself
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/vramdoc
COPY docker/requirements/agent.txt /tmp/requirements.txt
RUN /opt/vramdoc/bin/pip install --requirement /tmp/requirements.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY bot ./bot
RUN /opt/vramdoc/bin/pip install --no-deps .

# ---- runtime: slim Python and the venv; NVML arrives from the driver at run time
FROM ${PYTHON_IMAGE} AS runtime
# tini is PID 1: it forwards SIGTERM to vramdoc and reaps children, so shutdown is graceful.
# (Unpinned on purpose: the distribution's security updates replace old package versions.)
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install --yes --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 vramdoc \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin vramdoc
COPY --from=build /opt/vramdoc /opt/vramdoc
# The NVIDIA container runtime reads these: every GPU visible, and only the `utility` driver
# libraries (NVML, nvidia-smi), no compute libraries.
ENV PATH=/opt/vramdoc/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# NVML queries need the device nodes the runtime adds (mode 0666), not root; see docker/k8s/agent.yaml.
USER 10001:10001
WORKDIR /tmp
EXPOSE 9400
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9400/healthz', timeout=2)"]
ENTRYPOINT ["tini", "--", "vramdoc"]
CMD ["agent", "--listen", "0.0.0.0:9400"]
