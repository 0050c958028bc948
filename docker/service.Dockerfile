# syntax=docker/dockerfile:1
# The HTTP diagnosis service: `vramdoc serve` on port 8080, rule packs baked into the image.
# Build from the repository root:  docker build -f docker/service.Dockerfile -t vramdoc/service:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: a virtual environment with only the service's dependencies and the project itself
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/vramdoc
COPY docker/requirements/service.txt /tmp/requirements.txt
RUN /opt/vramdoc/bin/pip install --requirement /tmp/requirements.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY bot ./bot
RUN /opt/vramdoc/bin/pip install --no-deps .

# ---- runtime: the same slim Python, the venv, the rules; no compiler, no pip cache, not root
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
COPY rules /opt/vramdoc/rules
ENV PATH=/opt/vramdoc/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VRAMDOC_RULES_DIR=/opt/vramdoc/rules \
    VRAMDOC_PACK_CACHE=/opt/vramdoc/pack-cache
# Decode the baked-in rules once at build time: every worker then starts from the msgpack cache
# (read-only for the runtime user, which only needs to read it).
RUN vramdoc rules list >/dev/null
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["tini", "--", "vramdoc"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--workers", "2"]
