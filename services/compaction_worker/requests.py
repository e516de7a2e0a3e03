"""Compaction requests: what `agent-memory compact` (and `POST /v1/compactions`)
publishes for the compaction worker.

`agent-memory compact --user U [--project P]` publishes one request;
`--all [--project P]` one per user of the app with episodes older than the
retention (every request of one run carries the same `created_at`, the time the
users were listed, so each selects against the cut-off they were found with).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from datetime import datetime

import psycopg

from services.compaction_worker.handlers import cutoff, users_with_old_episodes
from shared.config import Settings
from shared.db.pool import connect_kwargs
from shared.errors import InvalidEvent
from shared.events import CompactionRequested, encode, utcnow
from shared.identifiers import identifier_problem


def compaction_request(
    app: str,
    user_id: str,
    project_id: str,
    retention_days: int,
    batch_limit: int,
    *,
    created_at: datetime | None = None,
    event_id: str | None = None,
) -> CompactionRequested:
    """A request to fold the user's episodes older than `retention_days` (only
    `project_id`'s when not ""), `batch_limit` per transaction. Raises `InvalidEvent`
    naming the field when a value breaks the event's rules (an identifier, a bound)."""
    event = CompactionRequested(
        event_id=event_id or str(uuid.uuid4()),
        app=app,
        user_id=user_id,
        project_id=project_id,
        retention_days=retention_days,
        batch_limit=batch_limit,
        created_at=created_at or utcnow(),
    )
    encode(event)  # validates: schema and rules, as on receipt
    return event


def _fail(message: str, code: int = 1) -> int:
    print(f"agent-memory compact: {message}", file=sys.stderr)
    return code


def run_compact_command(args: argparse.Namespace, settings: Settings) -> int:
    """`agent-memory compact`: publish the requests, print one line each and a total.
    Exit 0 when all were published, 2 for a bad command line, 1 when Postgres or
    Pub/Sub failed."""
    if bool(args.user) == bool(args.all):
        return _fail("give --user USER (one user) or --all (every user with old episodes)", 2)
    app = args.app or settings.default_app
    project = args.project or ""
    retention = (
        settings.compaction_retention_days if args.retention_days is None else args.retention_days
    )
    problem = _argument_problem(app, args, retention)
    if problem:
        return _fail(problem, 2)
    created_at = utcnow()
    if args.all:
        if not settings.database_url:
            return _fail("AM_DATABASE_URL is not set (--all lists the users from Postgres)")
        try:
            users = _old_episode_users(settings, app, project, cutoff(created_at, retention))
        except psycopg.Error as exc:
            return _fail(f"Postgres: {exc}")
    else:
        users = [args.user]
    try:
        requests = [
            compaction_request(
                app,
                user,
                project,
                retention,
                settings.compaction_batch_limit,
                created_at=created_at,
            )
            for user in users
        ]
    except InvalidEvent as exc:
        return _fail(str(exc), 2)
    return _publish(requests, settings, app)


def _argument_problem(app: str, args: argparse.Namespace, retention: int) -> str | None:
    for name, value in (("--app", app), ("--user", args.user), ("--project", args.project)):
        problem = identifier_problem(value) if value else None
        if problem:
            return f"{name}: {problem}"
    if retention < 1:
        return f"--retention-days: must be at least 1, not {retention}"
    return None


def _old_episode_users(settings: Settings, app: str, project: str, before: datetime) -> list[str]:
    assert settings.database_url  # checked before the command goes this far
    with psycopg.connect(
        settings.database_url,
        connect_timeout=max(1, int(settings.db_connect_timeout_seconds)),
        **connect_kwargs(settings),
    ) as conn:
        return users_with_old_episodes(conn, app, before, project)


def _publish(requests: list[CompactionRequested], settings: Settings, app: str) -> int:
    """Publish `requests`, one line each as Pub/Sub confirms it, then the total."""
    from google.api_core import exceptions as gexc

    from shared.bus.publisher import EventPublisher, counted_publishes

    publisher = EventPublisher(settings, counted=counted_publishes(settings))
    try:
        futures = [(request, publisher.publish(request)) for request in requests]
        for request, future in futures:
            future.result(timeout=settings.publish_timeout_seconds)
            print(
                f"published {request.event_id}  app={request.app}  user={request.user_id}  "
                f"project={request.project_id or '(all)'}  "
                f"retention_days={request.retention_days}",
                flush=True,
            )
    except gexc.GoogleAPIError as exc:
        hint = " (run `agent-memory topology apply`?)" if isinstance(exc, gexc.NotFound) else ""
        return _fail(f"Pub/Sub refused the request: {exc}{hint}")
    except TimeoutError:
        return _fail(f"Pub/Sub did not confirm within {settings.publish_timeout_seconds} s")
    finally:
        publisher.stop()
    print(f"{len(requests)} compaction request(s) published for app {app}")
    return 0
