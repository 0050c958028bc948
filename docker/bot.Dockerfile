# syntax=docker/dockerfile:1
# The Slack bot: `vramdoc bot`, Socket Mode when SLACK_APP_TOKEN is set (no inbound port needed),
# else the Events API over HTTP on port 3000 (`vramdoc bot --http --port 3000`, path /slack/events).
# Build from the repository root:  docker build -f docker/bot.Dockerfile -t vramdoc/bot:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: a virtual environment with only the bot's dependencies and the project itself
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/vramdoc
COPY docker/requirements/bot.txt /tmp/requirements.txt
RUN /opt/vramdoc/bin/pip install --requirement /tmp/requirements.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY bot ./bot
RUN /opt/vramdoc/bin/pip install --no-deps .

# ---- runtime: slim Python and the venv; the bot reaches the service over HTTP and holds no rules
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
COPY docker/bot-healthcheck.py /opt/vramdoc/bot-healthcheck.py
ENV PATH=/opt/vramdoc/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /tmp
EXPOSE 3000
STOPSIGNAL SIGTERM
# Socket Mode serves no port: healthy while the websocket to Slack is up (or, with --http, /healthz).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "/opt/vramdoc/bot-healthcheck.py"]
ENTRYPOINT ["tini", "--", "vramdoc"]
CMD ["bot"]
