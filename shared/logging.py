"""structlog configuration: JSON lines for Cloud Logging, a console renderer on a terminal.

Standard-library loggers (google-cloud, grpc, psycopg, uvicorn) go through the
same processors, so every line of a process has one format.
"""

from __future__ import annotations

import logging
import sys

import structlog


def _add_severity(_logger: object, method_name: str, event_dict: dict) -> dict:
    # Cloud Logging reads `severity`; keep `level` for humans.
    level = event_dict.get("level", method_name)
    event_dict["severity"] = str(level).upper()
    return event_dict


def _rename_event_to_message(_logger: object, _name: str, event_dict: dict) -> dict:
    if "event" in event_dict and "message" not in event_dict:
        event_dict["message"] = event_dict.pop("event")
    return event_dict


def configure_logging(fmt: str = "auto", level: str = "INFO") -> None:
    """Configure structlog and the stdlib root logger for this process.

    `fmt` is `json`, `console`, or `auto` (console on a terminal, JSON otherwise).
    """
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared_processors: list = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if use_json:
        renderer: list = [
            _add_severity,
            structlog.processors.format_exc_info,
            _rename_event_to_message,
            structlog.processors.JSONRenderer(),
        ]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=False)]

    structlog.configure(
        processors=[*shared_processors, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared_processors,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # These libraries are chatty at INFO; their warnings still come through.
    for noisy in ("google.cloud.pubsub_v1", "google.api_core", "grpc", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
