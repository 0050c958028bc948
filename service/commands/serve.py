"""`vramdoc serve`: the HTTP service under uvicorn, one or more worker processes.

Settings and rule packs are checked once here before any worker starts, so a typo in an
environment variable or a broken pack is one clear sentence and exit code 2, not a traceback per
worker. One worker is this process, serving the packs it just loaded; several are separate
processes, each building its app through the `create_app_from_env` factory and loading the packs
from the compiled-pack cache this process filled. SIGINT and SIGTERM drain in-flight requests (up
to 10 s) before exiting.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from typing import Any

import uvicorn

from service.api.app import create_app
from service.api.monitoring import access_log_config
from service.api.settings import Settings, SettingsError
from service.core import load_rules
from service.errors import PackError
from service.serving import server_options

__all__ = ["run"]

_GRACEFUL_SHUTDOWN_S = 10


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings.from_env()
        packs = load_rules(settings.rules_dir)
    except (SettingsError, PackError) as exc:
        print(f"vramdoc serve: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"vramdoc serve: --port must be between 0 and 65535, not {args.port}.", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"vramdoc serve: --workers must be at least 1, not {args.workers}.", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    metrics_dir = None
    if args.workers > 1 and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        # Every worker writes its counters here, so /metrics sums all workers, whichever answers.
        metrics_dir = tempfile.mkdtemp(prefix="vramdoc-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    # uvicorn runs an app object in this process; workers import the factory by name
    app: Any = (
        create_app(settings, packs=packs) if args.workers == 1 else "service.api.app:create_app_from_env"
    )
    try:
        uvicorn.run(
            app,
            factory=args.workers > 1,
            host=args.host,
            port=args.port,
            workers=args.workers,
            lifespan="on",
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
            access_log=os.environ.get("VRAMDOC_ACCESS_LOG", "").lower() in {"1", "true", "yes", "on"},
            log_config=access_log_config(),
            server_header=False,
            ws="none",
            **server_options(),
        )
    except SystemExit as exc:
        # uvicorn exits 3 when it cannot start (port in use, address not available); it logged why.
        if exc.code not in (0, None):
            print(f"vramdoc serve: could not serve on {args.host}:{args.port} (see above).", file=sys.stderr)
            return 2
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0
