"""The body of each `agent-memory` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from shared.config import Settings


def _fail(message: str, code: int = 1) -> int:
    print(f"agent-memory: {message}", file=sys.stderr)
    return code


def run_api(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from services.api.app import create_app
    from shared.metrics import serve_metrics
    from shared.tracing import configure as configure_tracing

    serve_metrics(settings.metrics_host, settings.metrics_port)
    configure_tracing(settings.tracing, "agent-memory-api")
    uvicorn.run(
        create_app(settings),
        host=settings.api_host,
        port=settings.api_port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    return 0


def run_worker_command(args: argparse.Namespace, settings: Settings) -> int:
    from services.worker import run_worker

    return run_worker(args.kind, settings)


def run_migrate(args: argparse.Namespace, settings: Settings) -> int:
    import psycopg

    from shared.db.migrate import MigrationError, migrate
    from shared.db.pool import connect_kwargs

    if not settings.database_url:
        return _fail("AM_DATABASE_URL is not set")
    try:
        applied = migrate(
            settings.database_url,
            settings.embedding_dim,
            login=connect_kwargs(settings),
            progress=_progress("migrate"),
        )
    except (MigrationError, ValueError) as exc:
        return _fail(str(exc))
    except psycopg.Error as exc:
        return _fail(f"Postgres: {exc}")
    print("applied: " + ", ".join(applied) if applied else "up to date")
    return 0


def run_topology(args: argparse.Namespace, settings: Settings) -> int:
    from shared.bus.admin import TopologyAdmin

    admin = TopologyAdmin(settings)
    states = admin.apply() if args.action == "apply" else admin.show()
    width = max(len(s.name.rsplit("/", 1)[1]) for s in states)
    for state in states:
        short = state.name.rsplit("/", 1)[1]
        line = f"{state.kind:<13} {short:<{width}}  {state.status}"
        if state.details:
            line += "  (" + "; ".join(state.details) + ")"
        print(line)
    bad = [s for s in states if s.status in ("missing", "differs")]
    if args.action == "show" and bad:
        print(f"{len(bad)} resource(s) missing or different; run `agent-memory topology apply`")
        return 1
    return 0


def run_dlq(args: argparse.Namespace, settings: Settings) -> int:
    from services.cli.dlq import run_dlq_command

    return run_dlq_command(args, settings)


def run_compact(args: argparse.Namespace, settings: Settings) -> int:
    from services.compaction_worker.requests import run_compact_command
    from shared.bus.reporting import reporting

    with reporting(settings):  # its requests count in the figures' backlog
        return run_compact_command(args, settings)


def run_archive(args: argparse.Namespace, settings: Settings) -> int:
    from services.cli.archive import run_archive_command

    return run_archive_command(args, settings)


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    from services.cli.portability import run_export as export

    return export(args, settings)


def run_import(args: argparse.Namespace, settings: Settings) -> int:
    from services.cli.portability import run_import as import_

    return import_(args, settings)


def run_keys(args: argparse.Namespace, settings: Settings) -> int:
    from services.cli.keys import run_keys_command

    return run_keys_command(args, settings)


def run_up(args: argparse.Namespace, settings: Settings) -> int:
    from services.dev.localstack.components import ComponentError
    from services.dev.localstack.stack import LocalStack, StackError, describe

    scale = {kind: n for item in args.scale for kind, n in item.items()}
    progress = _progress("up")
    stack = LocalStack(settings, args.data_dir, scale=scale, progress=progress)
    stack.install_signal_handlers()
    progress(f"starting the local stack in {stack.data_dir} ...")
    try:
        stack.start()
    except (StackError, ComponentError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("stopped during start-up", 130)
    print(describe(stack), flush=True)
    return stack.run_until_signal()


def _progress(command: str) -> Callable[[str], None]:
    """A command's progress lines: on stderr, so that stdout keeps only its outcome
    (the banner, what was applied), which scripts read."""

    def say(line: str) -> None:
        print(f"{command}: {line}", file=sys.stderr, flush=True)

    return say


def run_demo(args: argparse.Namespace, settings: Settings) -> int:
    from services.dev.demo import run_demo as demo
    from shared.logging import configure_logging

    # The demo prints its own story; the stack's processes log to files.
    configure_logging(settings.log_format, "WARNING")
    return demo(settings, keep=args.keep, llm=args.llm, embeddings=args.embeddings, out=args.out)
