"""`agent-memory dlq list|show|replay|purge`: what the operator sees.

Progress (count and rate) goes to stderr, and only when stderr is a terminal;
results go to stdout. Ctrl-C stops a command at its next step: what it read and
did not consume is handed back first, and a replay still prints its summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from google.api_core import exceptions as gexc
from google.auth.exceptions import GoogleAuthError
from tqdm import tqdm

from shared.bus.dlq import COUNT_CAP, DeadLetterQueues, MissingEvents
from shared.bus.replay import ReplayFilter, replay
from shared.bus.reporting import reporting
from shared.bus.topology import subscription_spec
from shared.config import Settings

INTERRUPTED = 130


def run_dlq_command(args: argparse.Namespace, settings: Settings) -> int:
    problem = pubsub_problem(settings)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if args.dlq_command != "list":
        try:
            args.subscription = subscription_spec(args.subscription, settings.topic_prefix).name
        except KeyError as exc:
            return _fail(str(exc.args[0]), 2)
    try:
        queues = DeadLetterQueues(settings)
    except GoogleAuthError as exc:
        return _fail(f"no Google Cloud credentials for Pub/Sub: {_one_line(exc)}", 2)
    actions = {"list": _list, "show": _show, "replay": _replay, "purge": _purge}
    try:
        with _stop_on_sigint(queues.stop):
            return actions[args.dlq_command](args, queues)
    except MissingEvents as exc:
        return _fail(str(exc), 2)
    except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
        return _fail(_pubsub_error(settings, exc))
    except KeyboardInterrupt:
        return _fail("interrupted; what was read is back in the dead letters", INTERRUPTED)
    finally:
        queues.close()


def pubsub_problem(settings: Settings) -> str | None:
    """Why there is no Pub/Sub to talk to and what to export; None if there is one."""
    if settings.pubsub_emulator_host or settings.pubsub_backend == "gcp":
        return None
    lines = [
        "agent-memory: PUBSUB_EMULATOR_HOST is not set and AM_PUBSUB_BACKEND is `emulator`: "
        "no Pub/Sub to read.",
        "For a local stack, export the variables `agent-memory up` prints "
        "(also in <data-dir>/endpoints.json):",
        "  export PUBSUB_EMULATOR_HOST=127.0.0.1:PORT",
        "  export GOOGLE_CLOUD_PROJECT=agent-memory-local",
        "For Pub/Sub in Google Cloud: export AM_PUBSUB_BACKEND=gcp GOOGLE_CLOUD_PROJECT=PROJECT",
    ]
    endpoints = settings.data_dir / "endpoints.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        saved = json.loads(endpoints.read_text())
        if saved["pubsub_emulator_host"]:
            lines += [
                f"{endpoints} names a stack's emulator:",
                f"  export PUBSUB_EMULATOR_HOST={saved['pubsub_emulator_host']}",
                f"  export GOOGLE_CLOUD_PROJECT={saved['google_cloud_project']}",
            ]
    return "\n".join(lines)


# -- the actions ---------------------------------------------------------------------
def _list(args: argparse.Namespace, queues: DeadLetterQueues) -> int:
    with _progress("counting") as (progress, _say):
        found = queues.counts(progress)
    rows = [("SUBSCRIPTION", "DEAD-LETTER SUBSCRIPTION", "WAITING")]
    rows += [(spec.name, path.rsplit("/", 1)[1], _count(n)) for spec, path, n in found]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for name, dead, count in rows:
        print(f"{name:<{widths[0]}}  {dead:<{widths[1]}}  {count:>{widths[2]}}")
    return 0


def _show(args: argparse.Namespace, queues: DeadLetterQueues) -> int:
    name = args.subscription
    with _progress(f"reading {name}") as (progress, _say):
        listing = queues.show(name, args.limit, progress)
    noun = "dead letter" if listing.total == 1 else "dead letters"
    head = f"{_count(listing.total)} {noun} in {name}"
    if listing.total > len(listing.letters):
        head += f"; showing the oldest {len(listing.letters)}"
    print(f"{head} (not consumed)")
    for letter in listing.letters:
        print(letter.line())
    return 0


def _replay(args: argparse.Namespace, queues: DeadLetterQueues) -> int:
    name = args.subscription
    flt = ReplayFilter(
        event_type=args.event_type,
        app=args.app,
        older_than=args.older_than,
        newer_than=args.newer_than,
        event_ids=frozenset(args.event_ids or ()),
    )
    # What it re-publishes goes into the figures' counts (the backlog), as any publish.
    with _progress(f"replaying {name}") as (progress, say), reporting(queues.settings) as figures:
        result = replay(queues, name, flt, args.limit, args.dry_run, say, progress)
        if figures is None and result.replayed and not args.dry_run:
            say("AM_VALKEY_URL is not set: the figures' backlog does not count this replay")
        if result.interrupted:
            say("interrupted; what was read and not replayed is back in the dead letters")
    if result.error is not None:
        _fail(_pubsub_error(queues.settings, result.error))
    print(result.summary(args.dry_run))
    if result.interrupted:
        return INTERRUPTED
    return 1 if result.failed or result.error is not None else 0


def _purge(args: argparse.Namespace, queues: DeadLetterQueues) -> int:
    name = args.subscription
    event_ids = list(dict.fromkeys(args.event_ids))
    with _progress(f"reading {name}") as (progress, say):
        purged = queues.purge(name, event_ids, args.yes, lambda letter: say(letter.line(), True))
    if args.yes:
        print(f"purged {purged}")
    else:
        them = "this dead letter" if purged == 1 else f"these {purged} dead letters"
        print(f"nothing purged; add --yes to delete {them} for good")
    return 0


# -- helpers ---------------------------------------------------------------------------
def _fail(message: str, code: int = 1) -> int:
    print(f"agent-memory: {message}", file=sys.stderr)
    return code


def _pubsub_error(settings: Settings, exc: gexc.GoogleAPICallError | gexc.RetryError) -> str:
    if isinstance(exc, gexc.NotFound):
        return f"Pub/Sub: {_one_line(exc)} (run `agent-memory topology apply`?)"
    where = settings.pubsub_emulator_host
    target = f"the Pub/Sub emulator at {where}" if where else "Pub/Sub"
    return f"{target} did not answer: {_one_line(exc)}"


def _count(n: int) -> str:
    return f"{COUNT_CAP}+" if n >= COUNT_CAP else str(n)


def _one_line(exc: BaseException) -> str:
    cause = exc.cause if isinstance(exc, gexc.RetryError) and exc.cause else exc
    return " ".join(str(getattr(cause, "message", None) or cause).split())


Say = Callable[..., None]


@contextmanager
def _progress(what: str) -> Iterator[tuple[Callable[[int], None], Say]]:
    """A counter with its rate on stderr if that is a terminal, and a way to print
    lines (to stderr, or to stdout with `out=True`) that does not garble it."""
    bar = tqdm(
        desc=what,
        unit=" letters",
        file=sys.stderr,
        disable=not sys.stderr.isatty(),
        leave=False,
        mininterval=0.2,
    )

    def say(line: str, out: bool = False) -> None:
        tqdm.write(line, file=sys.stdout if out else sys.stderr)

    try:
        yield bar.update, say
    finally:
        bar.close()


@contextmanager
def _stop_on_sigint(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C sets `stop` (the command ends at its next step, cleanly); a second
    Ctrl-C interrupts at once."""
    # None (set outside Python) and SIG_DFL (0) become Python's own: KeyboardInterrupt.
    previous = signal.getsignal(signal.SIGINT) or signal.default_int_handler
    if threading.current_thread() is not threading.main_thread() or previous == signal.SIG_IGN:
        yield
        return

    def asked(_signum: int, _frame: object) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, asked)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
