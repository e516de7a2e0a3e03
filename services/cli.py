"""`agent-memory`: the one console script for every process and operation.

Entry points are thin: read settings, configure logging, call the service.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import timedelta
from importlib import metadata
from pathlib import Path

from shared.config import ConfigError, Settings, load_settings
from shared.logging import configure_logging

_SUB_HELP = "a subscription: its short name (turns-summary), full id or dead-letter name"


def _age(text: str) -> timedelta:
    from shared.bus.dlq import parse_age

    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _scale(text: str) -> dict[str, int]:
    from shared.config import parse_scale

    try:
        return parse_scale(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _version() -> str:
    """The installed distribution's version (the source tree's when run from it)."""
    try:
        return metadata.version("agent-memory")
    except metadata.PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-memory", description="Long-term memory for AI agents on Pub/Sub."
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("api", help="run the API (HTTP on AM_API_HOST:AM_API_PORT)")
    worker = sub.add_parser("worker", help="run one worker process")
    worker.add_argument("kind", choices=["summary", "extraction", "compaction"])
    sub.add_parser("migrate", help="apply the SQL migrations in schemas/migrations")

    topology = sub.add_parser("topology", help="Pub/Sub topics and subscriptions")
    topology.add_argument("action", choices=["apply", "show"])

    dlq = sub.add_parser("dlq", help="dead-lettered messages: count, show, replay, purge")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    dlq_sub.add_parser("list", help="each subscription's dead-letter subscription and its count")
    show = dlq_sub.add_parser("show", help="print dead letters without consuming them")
    show.add_argument("subscription", metavar="SUB", help=_SUB_HELP)
    show.add_argument(
        "--limit", type=_at_least_one, default=20, metavar="N", help="print the N oldest (20)"
    )
    replay = dlq_sub.add_parser(
        "replay", help="re-publish dead letters for the subscription that dead-lettered them"
    )
    replay.add_argument("subscription", metavar="SUB", help=_SUB_HELP)
    replay.add_argument(
        "--event-id",
        action="append",
        dest="event_ids",
        metavar="ID",
        help="only this event (repeatable); if one is not there, nothing is replayed",
    )
    replay.add_argument("--event-type", metavar="T", help="only events of this type")
    replay.add_argument("--app", metavar="A", help="only events of this app")
    replay.add_argument(
        "--older-than",
        type=_age,
        metavar="D",
        help="only dead letters older than D (90s, 15m, 2h, 7d), counted from their dead-lettering",
    )
    replay.add_argument(
        "--newer-than", type=_age, metavar="D", help="only dead letters newer than D"
    )
    replay.add_argument("--limit", type=_at_least_one, metavar="N", help="replay at most N")
    replay.add_argument(
        "--dry-run", action="store_true", help="print what would be replayed; change nothing"
    )
    purge = dlq_sub.add_parser(
        "purge", help="delete dead letters that must never be replayed (asks for --yes)"
    )
    purge.add_argument("subscription", metavar="SUB", help=_SUB_HELP)
    purge.add_argument(
        "--event-id",
        action="append",
        dest="event_ids",
        metavar="ID",
        required=True,
        help="the event to delete (repeatable); if one is not there, nothing is deleted",
    )
    purge.add_argument(
        "--yes", action="store_true", help="delete them; without it they are only shown"
    )

    compact = sub.add_parser(
        "compact", help="publish compaction requests (old episodes into long-term summaries)"
    )
    compact.add_argument("--app", help="the tenant (default AM_DEFAULT_APP)")
    compact.add_argument("--user", help="one user of the app")
    compact.add_argument("--project", help="only this project's episodes (with --user)")
    compact.add_argument(
        "--all", action="store_true", help="every user of the app with old episodes"
    )
    compact.add_argument("--retention-days", type=int, help="default AM_COMPACTION_RETENTION_DAYS")

    keys = sub.add_parser("keys", help="API keys (one app each)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = keys_sub.add_parser("create", help="create a key and print it (shown once)")
    create.add_argument("--app", required=True)
    create.add_argument("--admin", action="store_true", help="may also call admin routes")
    create.add_argument("--name", default="", help="a label to recognise the key by")
    listing = keys_sub.add_parser("list", help="the keys (never their secret)")
    listing.add_argument("--app")
    revoke = keys_sub.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")

    up = sub.add_parser("up", help="start the local stack (no Docker, no root)")
    up.add_argument("--data-dir", type=Path, help="where data and logs live (default .local)")
    up.add_argument(
        "--scale",
        action="append",
        type=_scale,
        default=[],
        metavar="KIND=N",
        help="run N replicas of a worker kind (summary, extraction, compaction) on the same "
        "subscriptions; repeatable; default AM_SCALE, else 1 each",
    )
    demo = sub.add_parser("demo", help="start a fresh local stack and show the pipeline at work")
    demo.add_argument("--keep", action="store_true", help="keep the stack's data folder")
    demo.add_argument(
        "--llm", choices=["rules", "gemini"], help="LLM provider (default AM_LLM_PROVIDER, rules)"
    )
    demo.add_argument(
        "--embeddings",
        choices=["hash", "gemini"],
        help="embedding provider (default AM_EMBEDDING_PROVIDER, hash)",
    )
    demo.add_argument(
        "--out", type=Path, default=Path("demo-report"), help="where report.json and the chart go"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"agent-memory: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, settings.log_level)
    try:
        return _dispatch(args, settings)
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    from services import commands

    handlers = {
        "api": commands.run_api,
        "worker": commands.run_worker_command,
        "migrate": commands.run_migrate,
        "topology": commands.run_topology,
        "dlq": commands.run_dlq,
        "compact": commands.run_compact,
        "keys": commands.run_keys,
        "up": commands.run_up,
        "demo": commands.run_demo,
    }
    return handlers[args.command](args, settings)


if __name__ == "__main__":
    # `python -m services.cli` is how `up` starts its children, whatever the PATH.
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
