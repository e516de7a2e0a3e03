"""`agent-memory export` and `agent-memory import`: one user's memory as a JSON
Lines file (shared.portability), straight from and into Postgres
(AM_DATABASE_URL), like the other database commands.

`export` writes the file to stdout and a one-line summary to stderr. `import`
prints each bad line to stderr with its number and reason, imports the good ones,
and ends with `imported N memories, M episodes; skipped K already there; L bad
lines` on stdout. Exit codes: 0 done; 2 bad input (a bad argument, a file that
cannot be read, a user the app has nothing of, or bad lines: the good ones are
imported); 1 Postgres failed, or the target user was deleted (nothing imported).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import BinaryIO

import orjson
import psycopg
from pgvector.psycopg import register_vector

from shared.config import Settings
from shared.db.migrate import MigrationError, check_embedding_dimension
from shared.db.pool import connect_kwargs
from shared.db.user_export import export_lines, has_rows
from shared.events import utcnow
from shared.identifiers import identifier_problem
from shared.portability.importing import (
    ImportReport,
    UserDeleted,
    import_lines,
    numbered_lines,
)
from shared.portability.records import BadLine

Command = Callable[[argparse._SubParsersAction, str, str], argparse.ArgumentParser]


def add_commands(sub: argparse._SubParsersAction, command: Command) -> None:
    """The two commands' arguments (`command`: cli.py's maker of a subcommand)."""
    export = command(
        sub, "export", "write one user's memories and archived episodes as JSON Lines to stdout"
    )
    export.add_argument("--app", help="the tenant (default AM_DEFAULT_APP)")
    export.add_argument("--user", required=True, help="the user to export")
    imported = command(
        sub,
        "import",
        "import an export's memories and episodes (idempotent; bad lines are reported, "
        "the others imported)",
    )
    imported.add_argument("file", metavar="FILE", help="the export's file (- reads stdin)")
    imported.add_argument("--app", help="import into this app (default: the export's)")
    imported.add_argument(
        "--as-user", metavar="U", help="import as this user (default: the export's)"
    )


def _fail(command: str, message: str, code: int = 1) -> int:
    print(f"agent-memory {command}: {message}", file=sys.stderr)
    return code


def _argument_problem(values: dict[str, str | None]) -> str | None:
    for option, value in values.items():
        problem = value is not None and identifier_problem(value)
        if problem:
            return f"{option}: {problem}"
    return None


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    app = args.app or settings.default_app
    problem = _argument_problem({"--app": app, "--user": args.user})
    if problem:
        return _fail("export", problem, 2)
    if not settings.database_url:
        return _fail("export", "AM_DATABASE_URL is not set")
    out = sys.stdout.buffer
    try:
        with psycopg.connect(
            settings.database_url, autocommit=True, **connect_kwargs(settings)
        ) as conn:
            check_embedding_dimension(conn, settings.embedding_dim)
            if not has_rows(conn, app, args.user):
                return _fail("export", f"app {app!r} has nothing of user {args.user!r}", 2)
            last = b""
            for chunk in export_lines(conn, app, args.user, settings.embedding_dim, utcnow()):
                out.write(chunk)
                last = chunk
            out.flush()
    except MigrationError as exc:
        return _fail("export", str(exc))
    except psycopg.Error as exc:
        return _fail("export", f"Postgres: {' '.join(str(exc).split())}; the output is incomplete")
    except BrokenPipeError:
        return _fail("export", "the output was closed before the export ended")
    end = orjson.loads(last)
    print(
        f"exported {end['memories']} memories, {end['episodes']} episodes, "
        f"{end['entities']} entities, {end['facts']} facts, {end['merges']} merges of user "
        f"{args.user!r} (app {app!r})",
        file=sys.stderr,
    )
    return 0


def run_import(args: argparse.Namespace, settings: Settings) -> int:
    problem = _argument_problem({"--app": args.app, "--as-user": args.as_user})
    if problem:
        return _fail("import", problem, 2)
    if not settings.database_url:
        return _fail("import", "AM_DATABASE_URL is not set")
    report = ImportReport()
    with ExitStack() as files:
        try:
            stream = _open(args.file, files)
        except OSError as exc:
            return _fail("import", f"{args.file}: {exc.strerror or exc}", 2)
        try:
            report = _import(settings, stream, args)
        except MigrationError as exc:
            return _fail("import", str(exc))
        except UserDeleted as exc:
            return _fail("import", str(exc))
        except psycopg.Error as exc:
            message = " ".join(str(exc).split())
            return _fail("import", f"Postgres: {message}; run it again to go on")
    print(f"{report.summary()} (user {report.user_id!r} of app {report.app!r})")
    if report.bad_lines == 0 and not report.complete:
        print(
            f"agent-memory import: {args.file} does not end with the export's end line: "
            "it may have been cut short",
            file=sys.stderr,
        )
    return 2 if report.bad_lines else 0


def _open(path: str, files: ExitStack) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    return files.enter_context(open(path, "rb"))  # noqa: SIM115 - closed by the stack


def _import(settings: Settings, stream: BinaryIO, args: argparse.Namespace) -> ImportReport:
    assert settings.database_url

    def bad(line: BadLine) -> None:
        print(f"agent-memory import: {args.file}: {line}", file=sys.stderr, flush=True)

    with psycopg.connect(
        settings.database_url, autocommit=True, **connect_kwargs(settings)
    ) as conn:
        check_embedding_dimension(conn, settings.embedding_dim)
        register_vector(conn)  # embeddings are sent as pgvector's type
        return import_lines(
            conn,
            numbered_lines(stream),
            settings.embedding_dim,
            bad,
            app=args.app,
            user_id=args.as_user,
        )
