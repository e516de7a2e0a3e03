"""The guardrail: evaluates tool calls, with the allow-once grants in Valkey.

A grant is for this app, user, session, tool and exact command, consumed with
one GETDEL, so one grant allows exactly one call however many race for it.
The candidate patterns of one call are matched in a thread of the guardrail's
own (RE2 releases the GIL), so no pattern and no command can stall the event
loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
import structlog
import valkey
from psycopg_pool import AsyncConnectionPool

from shared.events import utcnow
from shared.metrics import count_store_error
from shared.permissions.patterns import PatternError, PatternSets
from shared.permissions.rules import (
    GLOBAL,
    Candidate,
    Candidates,
    RuleCache,
    Verdict,
    candidate_rules,
    decide,
)
from shared.session_buffer import SessionKey

log = structlog.get_logger("agent_memory.permissions")

# A match runs in a worker thread (RE2 releases the GIL); past this the call is
# PENDING. RE2 is linear in the command, but a Set's DFA of many hostile patterns
# can still be slow per byte: the event loop must never wait for it.
MATCH_TIMEOUT_SECONDS = 1.0
# Compiling a call's patterns (once per rule change, per process) has its own,
# longer bound: the rule limits bound its work, and a set that merely takes long
# to compile must not turn its BLOCK into PENDING.
COMPILE_TIMEOUT_SECONDS = 5.0


def grant_key(app: str, user_id: str, session_id: str, tool_name: str, command: str) -> str:
    """The grant's key: in the session's hash tag (like its buffer keys), named by a
    hash of the tool and the exact command."""
    digest = hashlib.sha256(json.dumps([tool_name, command]).encode()).hexdigest()
    return SessionKey(app, user_id, session_id).key(f"grant:{digest}")


async def add_grant(client: valkey.asyncio.Valkey, key: str, ttl_seconds: int) -> datetime:
    """One allow-once grant. Granting the same command again before it is used
    refreshes its expiry: still one grant, not two."""
    await client.set(key, b"1", ex=ttl_seconds)
    return utcnow() + timedelta(seconds=ttl_seconds)


async def consume_grant(client: valkey.asyncio.Valkey, key: str) -> bool:
    return await client.getdel(key) is not None


@dataclass(frozen=True)
class ToolCall:
    app: str
    user_id: str
    project_id: str | None
    session_id: str
    tool_name: str
    command: str


class Guardrail:
    """Evaluates tool calls; holds the caches and the matching threads of one API
    process. Built without I/O; the pool and client come with each call."""

    def __init__(self) -> None:
        self.rules = RuleCache()
        self.patterns = PatternSets()
        # Its own threads: a slow match must not hold the loop's default executor.
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="permission-match")

    def close(self) -> None:
        """Stop the matching threads (a match still running is not waited for)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def evaluate(
        self,
        call: ToolCall,
        exempt_tools: frozenset[str],
        pool: AsyncConnectionPool,
        client: valkey.asyncio.Valkey,
        cache_seconds: float,
    ) -> Verdict:
        """The verdict on `call`; never raises (an error is a PENDING with its reason)."""
        if call.tool_name in exempt_tools:
            return Verdict("ALLOW", "exempt", None, f"{call.tool_name} is exempt from permissions")
        try:
            return await self._evaluate(call, pool, client, cache_seconds)
        except Exception as exc:
            count_store_error(exc)
            reason = _failure(exc)
            log.warning("permission evaluation failed", reason=reason, error=repr(exc))
            return Verdict("PENDING", "none", None, f"needs human confirmation: {reason}")

    async def _evaluate(
        self,
        call: ToolCall,
        pool: AsyncConnectionPool,
        client: valkey.asyncio.Valkey,
        cache_seconds: float,
    ) -> Verdict:
        # The rules are read first (from the cache, mostly) so that matching them
        # in a thread overlaps the grant's round trip to Valkey; a grant still wins
        # whatever they say. Rules that cannot be read leave the grant unused.
        candidates = await self._candidates(call, pool, cache_seconds)
        key = grant_key(call.app, call.user_id, call.session_id, call.tool_name, call.command)
        granted, matched = await asyncio.gather(
            consume_grant(client, key),
            self._match(candidates, call.command),
            return_exceptions=True,
        )
        if isinstance(granted, BaseException):
            raise granted
        if granted:
            return Verdict("ALLOW", "allow_once", None, "allowed once by a grant (now used)")
        if isinstance(matched, BaseException):
            raise matched
        return decide(candidates.rules, matched, call.project_id)

    async def _match(self, candidates: Candidates, command: str) -> set[int]:
        if not candidates.rules:
            return set()
        patterns = candidates.patterns
        groups = self.patterns.cached(patterns)
        if groups is None:
            compiling = self._executor.submit(self.patterns.compiled, patterns)
            try:
                async with asyncio.timeout(COMPILE_TIMEOUT_SECONDS):
                    groups = await asyncio.wrap_future(compiling)
            except PatternError as exc:
                raise RuleError(candidates.rules[exc.index], exc.message) from None
            except TimeoutError:
                raise SlowCompile from None
        job = self._executor.submit(self.patterns.match_groups, groups, patterns, command.encode())
        async with asyncio.timeout(MATCH_TIMEOUT_SECONDS):
            return await asyncio.wrap_future(job)

    async def _candidates(
        self, call: ToolCall, pool: AsyncConnectionPool, cache_seconds: float
    ) -> Candidates:
        key = (call.app, call.user_id, call.project_id or GLOBAL, call.tool_name)
        if cache_seconds > 0 and (cached := self.rules.get(key, cache_seconds)) is not None:
            return cached
        generation = self.rules.generation
        found = await candidate_rules(pool, call.app, call.user_id, call.project_id, call.tool_name)
        rules = Candidates(found, tuple(r.pattern for r in found))
        if cache_seconds > 0:
            self.rules.put(key, rules, generation)
        return rules


class RuleError(Exception):
    def __init__(self, rule: Candidate, message: str) -> None:
        super().__init__(f"the pattern of rule {rule.id} does not compile ({message})")


class SlowCompile(Exception):
    """Compiling the rules took over COMPILE_TIMEOUT_SECONDS."""


def _failure(exc: Exception) -> str:
    """What went wrong, for the client: a cause, never a stack trace."""
    if isinstance(exc, RuleError):
        return str(exc)
    if isinstance(exc, valkey.ValkeyError):
        return "the grant store (Valkey) is unavailable"
    if isinstance(exc, psycopg.Error):
        return "the rule store (Postgres) is unavailable"
    if isinstance(exc, SlowCompile):
        return f"compiling the rules took over {COMPILE_TIMEOUT_SECONDS} s"
    if isinstance(exc, TimeoutError):
        return f"matching the rules took over {MATCH_TIMEOUT_SECONDS} s"
    return "permissions could not be evaluated"
