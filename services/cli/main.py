"""`agent-memory`: the one console script for every process and operation.

Entry points are thin: read settings, configure logging, call the service.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from services.cli.parser import build_parser, version
from shared.config import ConfigError, Settings, load_settings
from shared.logging import configure_logging


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "mcp":
        # A client of the API: it needs none of the server's AM_* settings.
        from services.mcp_server import stdio

        configure_logging("auto", "WARNING")
        return stdio.main(version())
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
    from services.cli import commands
    from services.cli.config_reference import run_config_command

    handlers = {
        "api": commands.run_api,
        "worker": commands.run_worker_command,
        "migrate": commands.run_migrate,
        "topology": commands.run_topology,
        "dlq": commands.run_dlq,
        "compact": commands.run_compact,
        "archive": commands.run_archive,
        "export": commands.run_export,
        "import": commands.run_import,
        "keys": commands.run_keys,
        "config": run_config_command,
        "up": commands.run_up,
        "demo": commands.run_demo,
    }
    return handlers[args.command](args, settings)
