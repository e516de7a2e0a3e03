"""The body of each `agent-memory` command."""

from __future__ import annotations

import argparse
import sys

from shared.config import Settings


def _fail(message: str, code: int = 1) -> int:
    print(f"agent-memory: {message}", file=sys.stderr)
    return code


def run_api(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from services.read_api.app import create_app
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
            settings.database_url, settings.embedding_dim, login=connect_kwargs(settings)
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
    from google.api_core import exceptions as gexc

    from shared.bus.dlq import COUNT_CAP, DeadLetterQueues, ReplayFilter, parse_age

    queues = DeadLetterQueues(settings)
    try:
        if args.dlq_command == "list":
            for spec, path, count in queues.counts():
                shown = f"{count}+" if count >= COUNT_CAP else str(count)
                print(f"{spec.name:<28} {path.rsplit('/', 1)[1]:<40} {shown}")
            return 0
        if args.dlq_command == "show":
            letters = queues.peek(args.subscription, args.limit)
            print(f"{len(letters)} dead letter(s) in {args.subscription} (not consumed)")
            for letter in letters:
                age = int(letter.age().total_seconds())
                print(
                    f"{letter.event_id or letter.message_id}  {letter.event_type or '?'}  "
                    f"app={letter.app or '?'}  attempts={letter.attempts}  age={age}s  "
                    f"reason={letter.reason}"
                )
            return 0
        flt = ReplayFilter(
            event_type=args.event_type,
            app=args.app,
            older_than=parse_age(args.older_than) if args.older_than else None,
            newer_than=parse_age(args.newer_than) if args.newer_than else None,
        )
        result = queues.replay(
            args.subscription,
            flt,
            limit=args.limit,
            dry_run=args.dry_run,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
        print(result.summary(args.dry_run))
        return 1 if result.failed else 0
    except (KeyError, ValueError) as exc:
        return _fail(str(exc).strip("'\""))
    except gexc.GoogleAPICallError as exc:
        hint = " (run `agent-memory topology apply`?)" if isinstance(exc, gexc.NotFound) else ""
        return _fail(f"Pub/Sub refused the request: {exc.message}{hint}")
    finally:
        queues.close()


def run_compact(args: argparse.Namespace, settings: Settings) -> int:
    from services.compaction_worker.requests import run_compact_command

    return run_compact_command(args, settings)


def run_keys(args: argparse.Namespace, settings: Settings) -> int:
    from services.read_api.keys import run_keys_command

    return run_keys_command(args, settings)


def run_up(args: argparse.Namespace, settings: Settings) -> int:
    from shared.localstack.components import ComponentError
    from shared.localstack.stack import LocalStack, StackError, describe

    stack = LocalStack(settings, args.data_dir)
    stack.install_signal_handlers()
    try:
        stack.start()
    except (StackError, ComponentError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("stopped during start-up", 130)
    print(describe(stack), flush=True)
    return stack.run_until_signal()


def run_demo(args: argparse.Namespace, settings: Settings) -> int:
    from services.demo import run_demo as demo
    from shared.logging import configure_logging

    # The demo prints its own story; the stack's processes log to files.
    configure_logging(settings.log_format, "WARNING")
    return demo(settings, keep=args.keep, llm=args.llm, embeddings=args.embeddings, out=args.out)
