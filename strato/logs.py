"""Server logs: a timestamp, the level, the logger, the request id on every line.

`strato serve --log-format text` (default) or `json` (one JSON object per line,
for a log pipeline). The request id is the one every answer carries in
`x-openstack-request-id`; a caller's own id (`x-openstack-request-id` sent
with the request, Placement's global request id) is logged beside it.
Access logs (uvicorn's) are on at INFO whatever `--log-level` says of the rest.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson

# Set by the API middleware for the request being served ("-" outside one).
REQUEST_ID: ContextVar[str] = ContextVar("strato_request_id", default="-")
GLOBAL_REQUEST_ID: ContextVar[str] = ContextVar("strato_global_request_id", default="-")

TEXT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s %(global_request_id)s] %(message)s"
FORMATS = ("text", "json")


class RequestIds(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        record.global_request_id = GLOBAL_REQUEST_ID.get()
        return True


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname, "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "global_request_id": getattr(record, "global_request_id", "-"),
            "message": record.getMessage()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out).decode()


def config(level: str, fmt: str) -> dict[str, Any]:
    """A logging.dictConfig for the server (uvicorn's `log_config`)."""
    formatter: dict[str, Any] = ({"()": JsonLines} if fmt == "json"
                                 else {"format": TEXT, "datefmt": None})
    return {
        "version": 1, "disable_existing_loggers": False,
        "filters": {"ids": {"()": RequestIds}},
        "formatters": {"main": formatter},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "main",
                                "filters": ["ids"], "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        },
    }
