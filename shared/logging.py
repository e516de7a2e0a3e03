"""structlog configuration: JSON lines for Cloud Logging, a console renderer on a terminal.

Our own log calls render straight to stderr (no trip through the stdlib logging
machinery: a worker writes one line per message, so this is on the hot path).
Standard-library loggers (google-cloud, grpc, psycopg, uvicorn) are rendered by
the same processors, so every line of a process is rendered the same way (theirs
also carry the `logger` name).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO

import orjson
import structlog

_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40}


def _add_severity(_logger: object, method_name: str, event_dict: dict) -> dict:
    # Cloud Logging reads `severity`; keep `level` for humans.
    level = event_dict.get("level", method_name)
    event_dict["severity"] = str(level).upper()
    return event_dict


def _rename_event_to_message(_logger: object, _name: str, event_dict: dict) -> dict:
    if "event" in event_dict and "message" not in event_dict:
        event_dict["message"] = event_dict.pop("event")
    return event_dict


def _dumps(value: object, default: Callable[[Any], Any] | None = None, **_options: object) -> str:
    # orjson renders a line several times faster than the json module; anything
    # it cannot render goes through structlog's fallback (repr), as before.
    return orjson.dumps(value, default=default, option=orjson.OPT_NON_STR_KEYS).decode()


def configure_logging(fmt: str = "auto", level: str = "INFO", stream: TextIO | None = None) -> None:
    """Configure structlog and the stdlib root logger for this process.

    `fmt` is `json`, `console`, or `auto` (console on a terminal, JSON otherwise);
    the lines go to `stream`, stderr by default.
    """
    stream = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not stream.isatty())
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    if use_json:
        renderer: list = [
            _add_severity,
            structlog.processors.format_exc_info,
            _rename_event_to_message,
            structlog.processors.JSONRenderer(serializer=_dumps),
        ]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=False)]

    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            timestamper,
            *renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            timestamper,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # These libraries are chatty at INFO; their warnings still come through.
    for noisy in ("google.cloud.pubsub_v1", "google.api_core", "grpc", "httpx", "urllib3", "mcp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, _LEVELS[level]))
