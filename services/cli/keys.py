"""`agent-memory keys create|list|revoke`."""

from __future__ import annotations

import argparse
import sys

import psycopg

from shared.api_keys import create_key, list_keys, revoke_key
from shared.config import Settings
from shared.db.pool import connect_kwargs


def run_keys_command(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.database_url:
        print("agent-memory: AM_DATABASE_URL is not set", file=sys.stderr)
        return 2
    try:
        conn = psycopg.connect(settings.database_url, autocommit=True, **connect_kwargs(settings))
    except psycopg.Error as exc:
        print(f"agent-memory: Postgres: {exc}", file=sys.stderr)
        return 1
    with conn:
        if args.keys_command == "create":
            try:
                key, record = create_key(conn, args.app, args.admin, args.name, args.agent)
            except ValueError as exc:
                print(f"agent-memory: {exc}", file=sys.stderr)
                return 2
            kind = "admin key" if record.admin else "key"
            agent = f", agent {record.agent_id} only" if record.agent_id else ""
            print(f"created {kind} {record.id} for app {record.app}{agent} (shown once, keep it):")
            print(key)
            return 0
        if args.keys_command == "list":
            for k in list_keys(conn, args.app):
                state = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "active"
                role = "admin" if k.admin else f"agent={k.agent_id}" if k.agent_id else "-"
                print(
                    f"{k.id}  app={k.app}  {k.prefix}…  {role}  {state}  "
                    f"created {k.created_at:%Y-%m-%d %H:%M}  {k.name}"
                )
            return 0
        if revoke_key(conn, args.key_id):
            print(f"revoked {args.key_id}")
            return 0
        print(f"agent-memory: no active key with id {args.key_id}", file=sys.stderr)
        return 1
