"""`VRAMDOC_ACCESS_LOG=1` logs request lines; their query strings are redacted (a real uvicorn config)."""

from __future__ import annotations

import logging
import logging.config

import pytest

from service.api.monitoring import access_log_config

SECRET = "hf_" + "AcCeSsLoGpLaNtEd0123456789abcdef"


def test_access_log_lines_have_their_query_strings_redacted(caplog: pytest.LogCaptureFixture) -> None:
    logging.config.dictConfig(access_log_config())
    access = logging.getLogger("uvicorn.access")
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    [handler] = access.handlers
    keep = Keep()
    keep.filters = list(handler.filters)
    access.addHandler(keep)
    try:
        access.info(
            '%s - "%s %s HTTP/%s" %d',
            "127.0.0.1:5000",
            "POST",
            f"/v1/diagnose?command=vllm+serve+m+--hf-token+{SECRET}&model=m",
            "1.1",
            200,
        )
    finally:
        access.removeHandler(keep)
    [line] = records
    assert SECRET[:12] not in line
    assert "/v1/diagnose?command=vllm+serve+m+--hf-token+[REDACTED]&model=m" in line
