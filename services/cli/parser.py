"""The command line of `agent-memory`: every command, its options, their help
and examples (`agent-memory COMMAND --help`)."""

from __future__ import annotations

import argparse
from datetime import timedelta
from importlib import metadata
from pathlib import Path

from shared.bus.topology import WORKER_KINDS

_SUB_HELP = "a subscription: its short name (turns-summary), full id or dead-letter name"

_Subparsers = argparse._SubParsersAction


def _age(text: str) -> timedelta:
    from shared.bus.dlq import parse_age

    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _scale(text: str) -> dict[str, int]:
    from shared.scale import parse_scale

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


def version() -> str:
    """The installed distribution's version (the source tree's when run from it)."""
    try:
        return metadata.version("agent-memory")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-memory", description="Long-term memory for AI agents on Pub/Sub."
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_processes,
        _add_topology,
        _add_dlq,
        _add_compact,
        _add_archive,
        _add_portability,
        _add_keys,
        _add_config,
        _add_up,
        _add_demo,
        _add_mcp,
    ):
        add(sub)
    _add_examples(parser)
    return parser


# The example each subcommand's `--help` ends with.
EXAMPLES = {
    "api": "AM_API_PORT=8080 agent-memory api",
    "worker": "agent-memory worker extraction",
    "worker summary": "AM_WORKER_CONCURRENCY=16 agent-memory worker summary",
    "worker extraction": "AM_LLM_PROVIDER=gemini agent-memory worker extraction",
    "worker compaction": "agent-memory worker compaction",
    "migrate": "AM_DATABASE_URL=postgresql://… agent-memory migrate",
    "topology": "agent-memory topology show",
    "topology apply": "agent-memory topology apply",
    "topology show": "agent-memory topology show",
    "dlq": "agent-memory dlq list",
    "dlq list": "agent-memory dlq list",
    "dlq show": "agent-memory dlq show turns-extraction --limit 5",
    "dlq replay": "agent-memory dlq replay turns-extraction --older-than 15m --dry-run",
    "dlq purge": "agent-memory dlq purge turns-summary --event-id 6f1c1a52-… --yes",
    "compact": "agent-memory compact --all --retention-days 30",
    "archive": "agent-memory archive backfill-keys",
    "archive backfill-keys": "agent-memory archive backfill-keys --batch 50",
    "export": "agent-memory export --app acme --user u-42 > u-42.jsonl",
    "import": "agent-memory import u-42.jsonl --as-user u-43",
    "keys": "agent-memory keys list",
    "keys create": "agent-memory keys create --app acme --name 'support agent'",
    "keys list": "agent-memory keys list",
    "keys revoke": "agent-memory keys revoke 3f2b…",
    "config": "agent-memory config reference --write",
    "config reference": "agent-memory config reference > configuration.md",
    "up": "agent-memory up --scale extraction=2",
    "demo": "agent-memory demo --keep --out demo-report",
    "mcp": "AGENT_MEMORY_URL=http://127.0.0.1:8080 AGENT_MEMORY_API_KEY=am_… agent-memory mcp",
}


def _add_examples(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                words = (*path, name)
                child.epilog = f"example:\n  {EXAMPLES[' '.join(words)]}"
                # Keeps the example's line as written (the options still wrap).
                child.formatter_class = argparse.RawDescriptionHelpFormatter
                _add_examples(child, words)


def _command(sub: _Subparsers, name: str, help_: str) -> argparse.ArgumentParser:
    """A subcommand whose `--help` opens with the same line `agent-memory --help` shows."""
    return sub.add_parser(name, help=help_, description=help_)


def _actions(
    parser: argparse.ArgumentParser, dest: str, metavar: str | None, help_: str
) -> _Subparsers:
    # Without a metavar the choices are listed and errors name `dest`, as for a positional.
    return parser.add_subparsers(dest=dest, required=True, metavar=metavar, help=help_)


def _add_processes(sub: _Subparsers) -> None:
    _command(sub, "api", "run the API (HTTP on AM_API_HOST:AM_API_PORT)")
    from shared.bus.topology import subscriptions_of

    # Each kind is a subcommand of its own so that `worker KIND --help` describes it.
    kinds = _actions(
        _command(sub, "worker", "run one worker process"), "kind", None, "the worker's kind"
    )
    for kind in WORKER_KINDS:
        consumes = ", ".join(s.name for s in subscriptions_of(kind))
        _command(kinds, kind, f"the {kind} worker, consuming {consumes}")
    _command(sub, "migrate", "apply the SQL migrations in schemas/migrations")


def _add_topology(sub: _Subparsers) -> None:
    topology = _command(sub, "topology", "Pub/Sub topics and subscriptions")
    actions = _actions(topology, "action", None, "what to do")
    _command(actions, "apply", "create or update them; report a difference it cannot change")
    _command(
        actions, "show", "compare them with the definition (exit 1 if one is missing or differs)"
    )


def _add_dlq(sub: _Subparsers) -> None:
    dlq = _command(sub, "dlq", "dead-lettered messages: count, show, replay, purge")
    actions = _actions(dlq, "dlq_command", "ACTION", "what to do")
    _command(actions, "list", "each subscription's dead-letter subscription and its count")
    show = _command(actions, "show", "print dead letters without consuming them")
    show.add_argument("subscription", metavar="SUB", help=_SUB_HELP)
    show.add_argument(
        "--limit",
        type=_at_least_one,
        default=20,
        metavar="N",
        help="print the N oldest (default 20)",
    )
    _add_replay(actions)
    purge = _by_event(
        actions,
        "purge",
        "delete dead letters that must never be replayed (asks for --yes)",
        "the event to delete (repeatable); if one is not there, nothing is deleted",
        required=True,
    )
    purge.add_argument(
        "--yes", action="store_true", help="delete them; without it they are only shown"
    )


def _by_event(
    actions: _Subparsers, name: str, help_: str, event_help: str, required: bool
) -> argparse.ArgumentParser:
    """A `dlq` action on one subscription's dead letters, chosen by event id."""
    action = _command(actions, name, help_)
    action.add_argument("subscription", metavar="SUB", help=_SUB_HELP)
    action.add_argument(
        "--event-id",
        action="append",
        dest="event_ids",
        metavar="ID",
        required=required,
        help=event_help,
    )
    return action


def _add_replay(actions: _Subparsers) -> None:
    replay = _by_event(
        actions,
        "replay",
        "re-publish dead letters for the subscription that dead-lettered them",
        "only this event (repeatable); if one is not there, nothing is replayed",
        required=False,
    )
    replay.add_argument(
        "--event-type", metavar="T", help="only events of this type (turn.recorded.v1)"
    )
    replay.add_argument("--app", metavar="A", help="only events of this app (tenant)")
    replay.add_argument(
        "--older-than",
        type=_age,
        metavar="D",
        help="only dead letters older than D (90s, 15m, 2h, 7d), counted from their dead-lettering",
    )
    replay.add_argument(
        "--newer-than", type=_age, metavar="D", help="only dead letters newer than D"
    )
    replay.add_argument(
        "--limit", type=_at_least_one, metavar="N", help="replay at most N (default: all)"
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="print what would be replayed; change nothing"
    )


def _add_compact(sub: _Subparsers) -> None:
    compact = _command(
        sub, "compact", "publish compaction requests (old episodes into long-term summaries)"
    )
    compact.add_argument("--app", help="the tenant (default AM_DEFAULT_APP)")
    compact.add_argument("--user", help="one user of the app")
    compact.add_argument("--project", help="only this project's episodes (with --user)")
    compact.add_argument(
        "--all", action="store_true", help="every user of the app with old episodes"
    )
    compact.add_argument("--retention-days", type=int, help="default AM_COMPACTION_RETENTION_DAYS")


def _add_archive(sub: _Subparsers) -> None:
    actions = _actions(
        _command(sub, "archive", "the episodic archive's search keys"),
        "archive_command",
        "ACTION",
        "what to do",
    )
    backfill = _command(
        actions,
        "backfill-keys",
        "key the episodes archived without a search key, session by session (resumable; "
        "the workers keep running)",
    )
    backfill.add_argument(
        "--batch", type=_at_least_one, default=100, help="sessions read per batch (default 100)"
    )


def _add_portability(sub: _Subparsers) -> None:
    from services.cli.portability import add_commands

    add_commands(sub, _command)


def _add_keys(sub: _Subparsers) -> None:
    actions = _actions(
        _command(sub, "keys", "API keys (one app each)"), "keys_command", "ACTION", "what to do"
    )
    create = _command(actions, "create", "create a key and print it (shown once)")
    create.add_argument("--app", required=True, help="the app (tenant) the key belongs to")
    create.add_argument("--admin", action="store_true", help="may also call admin routes")
    create.add_argument("--name", default="", help="a label to recognise the key by")
    create.add_argument("--agent", help="limit the key to this agent (it acts as it)")
    listing = _command(actions, "list", "the keys (never their secret)")
    listing.add_argument("--app", help="only this app's keys")
    revoke = _command(actions, "revoke", "revoke a key by its id")
    revoke.add_argument("key_id", help="the id `keys list` shows")


def _add_config(sub: _Subparsers) -> None:
    actions = _actions(
        _command(sub, "config", "the configuration's reference"),
        "config_command",
        "ACTION",
        "what to do",
    )
    reference = _command(
        actions, "reference", "print the settings' reference (Markdown) from their definitions"
    )
    reference.add_argument(
        "--write",
        action="store_true",
        help="replace the generated part of docs/configuration.md instead of printing it",
    )


def _add_up(sub: _Subparsers) -> None:
    up = _command(sub, "up", "start the local stack (no Docker, no root)")
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


def _add_demo(sub: _Subparsers) -> None:
    demo = _command(sub, "demo", "start a fresh local stack and show the pipeline at work")
    demo.add_argument("--keep", action="store_true", help="keep the stack's data folder")
    demo.add_argument(
        "--llm",
        choices=["offline", "gemini", "openai", "rules"],
        help="LLM provider (default AM_LLM_PROVIDER, offline; openai: AM_OPENAI_BASE_URL's model; "
        "rules: offline's former name)",
    )
    demo.add_argument(
        "--embeddings",
        choices=["hash", "gemini", "openai"],
        help="embedding provider (default AM_EMBEDDING_PROVIDER, hash)",
    )
    demo.add_argument(
        "--out", type=Path, default=Path("demo-report"), help="where report.json and the chart go"
    )


def _add_mcp(sub: _Subparsers) -> None:
    _command(
        sub,
        "mcp",
        "serve the memory as MCP tools over stdio (AGENT_MEMORY_URL, AGENT_MEMORY_API_KEY; "
        "see docs/mcp.md)",
    )
