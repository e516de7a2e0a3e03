"""The tool-permission guardrail: may this agent run this tool call now?

An evaluation walks four tiers and stops at the first that decides:

1. exempt tools (`AM_PERMISSION_EXEMPT_TOOLS`): always ALLOW;
2. an allow-once grant for this app, user, session, tool and exact command,
   consumed with one GETDEL, so one grant allows exactly one call however many
   race for it (the reference read it, then deleted it: two calls could share it);
3. the user's rules for the project, then 4. the user's global rules (stored
   with project_id ''). Within a tier BLOCK beats ALLOW.

Nothing decides: PENDING (a human confirms). Any error (Valkey or Postgres
down, a stored pattern that does not compile, a match that takes too long) is
PENDING too: the guardrail fails closed, never open.

Patterns are RE2 (linear time in the command, whatever the pattern: no
catastrophic backtracking on agent-supplied input) with `re.search` semantics:
a rule matches when its pattern matches anywhere in the command; anchor it
with `^...$` to match the whole command. The candidate patterns of one call
are matched by `re2.Set`s, in a thread of the guardrail's own (RE2 releases
the GIL), so no pattern and no command can stall the event loop.

One `re2.Set` of every candidate did not compile past RE2's memory budget
(8 MiB: 80,000 to 140,000 program instructions): 154 rules like `x.{0,100}y`
(a bounded repetition of `.`, about 900 instructions each) were enough, and
every call of that scope was PENDING. So the patterns are compiled in Sets of
at most `SET_PROGRAM_BUDGET` instructions (a Set that still fails is halved; a
lone pattern is matched by itself), and a rule is refused (422) when its
pattern, or its scope's rules together, exceed the limits below: any rule set
the API accepted then compiles, well within `COMPILE_TIMEOUT_SECONDS`.

For speed, one process keeps the candidate rules of (app, user, project, tool)
for `AM_PERMISSION_CACHE_SECONDS` (its own rule writes clear them at once) and
the compiled sets keyed by their patterns.

The command is `tool_args["CommandLine"]` when that is a string, else the
canonical JSON of `tool_args`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

import psycopg
import re2
import structlog
import valkey
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from shared.events import utcnow
from shared.identifiers import text_problem
from shared.metrics import count_store_error
from shared.session_buffer import SessionKey

log = structlog.get_logger("agent_memory.permissions")

Decision = Literal["ALLOW", "BLOCK", "PENDING"]
Tier = Literal["exempt", "allow_once", "project", "global", "none"]
Action = Literal["ALLOW", "BLOCK"]

GLOBAL = ""  # the project_id of global rules in the table
ANY_TOOL = "*"  # a rule for every tool
MAX_PATTERN_LENGTH = 1000
# Rules of one scope (a user's rules of one project, or their global rules).
# Generous: bench/permissions.py gives one user 700 project and 300 global rules.
MAX_RULES_PER_SCOPE = 1000
# RE2 program instructions: of one pattern (`.{0,1000}x` is about 9,000), and of
# a scope's patterns together (1,000 rules of 250; a typical rule is under 50).
# A call's candidates come from two scopes, so they are at most 2,000 rules or
# 500,000 instructions: compiled in 0.1 to 0.6 s here (COMPILE_TIMEOUT_SECONDS).
MAX_PATTERN_PROGRAM = 10_000
MAX_SCOPE_PROGRAM = 250_000
# Instructions per compiled Set: RE2's default max_mem (8 MiB) took 80,000 to
# 140,000 of them depending on the patterns; half the least leaves a margin.
SET_PROGRAM_BUDGET = 40_000
# A match runs in a worker thread (RE2 releases the GIL); past this the call is
# PENDING. RE2 is linear in the command, but a Set's DFA of many hostile patterns
# can still be slow per byte: the event loop must never wait for it.
MATCH_TIMEOUT_SECONDS = 1.0
# Compiling a call's patterns (once per rule change, per process) has its own,
# longer bound: the limits above bound its work, and a set that merely takes long
# to compile must not turn its BLOCK into PENDING.
COMPILE_TIMEOUT_SECONDS = 5.0
# Each compiled Set may grow a DFA cache of up to RE2's max_mem (8 MiB) on
# unusual input: 128 Sets (not candidate lists: one list may need several) bound
# that at 1 GiB, as the `re2` module's own cache does.
PATTERN_SET_CACHE_SIZE = 128
PROGRAM_SIZE_CACHE_SIZE = 65_536
RULE_CACHE_SIZE = 10_000

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every rejected pattern on stderr


class PatternError(Exception):
    """A stored pattern does not compile (it was written around the API)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"pattern {index} does not compile: {message}")
        self.index = index
        self.message = message


@dataclass(frozen=True)
class Rule:
    id: str
    user_id: str
    project_id: str  # GLOBAL for a global rule
    tool_name: str
    pattern: str
    action: Action
    created_at: datetime


class Candidate(NamedTuple):
    """A rule as evaluation needs it (read for every call, so nothing more)."""

    id: str
    project_id: str
    pattern: str
    action: Action


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    tier: Tier
    rule_id: str | None
    reason: str


# -- commands and patterns ---------------------------------------------------------


def canonical_json(tool_args: dict[str, Any]) -> str:
    return json.dumps(tool_args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def command_of(tool_args: dict[str, Any], canonical: str | None = None) -> str:
    """The text that patterns and grants see (`canonical`: the args' canonical JSON,
    if the caller has it already)."""
    command = tool_args.get("CommandLine")
    if isinstance(command, str):
        return command
    return canonical if canonical is not None else canonical_json(tool_args)


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` cannot be a rule's pattern, or None."""
    if not pattern:
        return "must not be empty (use .* to match every command)"
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"must be at most {MAX_PATTERN_LENGTH} characters"
    problem = text_problem(pattern)
    if problem:
        return problem
    try:
        size = program_size(pattern)
    except re2.error as exc:
        return f"is not an RE2 pattern ({_message(exc)}); RE2 has no back-references or lookarounds"
    if size > MAX_PATTERN_PROGRAM:
        return (
            f"is too complex: its RE2 program has {size} instructions, at most "
            f"{MAX_PATTERN_PROGRAM} (a bounded repetition such as .{{0,100}} costs about "
            "9 instructions per repeat: prefer .*)"
        )
    return None


@functools.lru_cache(maxsize=PROGRAM_SIZE_CACHE_SIZE)
def program_size(pattern: str) -> int:
    """The size of `pattern`'s RE2 program, in instructions (re2.error if it does
    not compile). Cached: a rule write sums those of its whole scope."""
    return re2.compile(pattern, _OPTIONS).programsize


def _compile_error(pattern: str) -> str:
    """RE2's reason for rejecting `pattern` (a Set only says that it did)."""
    try:
        re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        return _message(exc)
    return "rejected by RE2"


def _message(exc: re2.error) -> str:
    raw = exc.args[0] if exc.args else "invalid"
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


class _Group(NamedTuple):
    """Some of a call's patterns, compiled together. `indices`: their positions
    among the call's patterns; `matcher`: an `re2.Set` whose index 0 is the empty
    pattern, or (for a pattern that no Set took) the pattern's own RE2."""

    indices: tuple[int, ...]
    matcher: Any


class PatternSets:
    """Compiled patterns, keyed by the call's patterns (LRU). The rule cache expires
    every few seconds; unchanged rules then reuse their compiled Sets. Safe to use
    from several threads (an RE2 is; the cache takes a lock)."""

    def __init__(self, size: int = PATTERN_SET_CACHE_SIZE) -> None:
        self._size = size  # in compiled groups: each may hold a DFA cache of max_mem
        self._sets: OrderedDict[tuple[str, ...], tuple[_Group, ...]] = OrderedDict()
        self._groups = 0
        self._lock = threading.Lock()

    def matches(self, patterns: tuple[str, ...], command: bytes) -> set[int]:
        """Indices of the patterns that match somewhere in `command`."""
        return self.match_groups(self.compiled(patterns), patterns, command)

    def match_groups(
        self, groups: tuple[_Group, ...], patterns: tuple[str, ...], command: bytes
    ) -> set[int]:
        """`matches`, given `compiled(patterns)`."""
        found: set[int] = set()
        for group in groups:
            found |= self._group_matches(group, patterns, command)
        return found

    def cached(self, patterns: tuple[str, ...]) -> tuple[_Group, ...] | None:
        with self._lock:
            compiled = self._sets.get(patterns)
            if compiled is not None:
                self._sets.move_to_end(patterns)
            return compiled

    def _group_matches(self, group: _Group, patterns: tuple[str, ...], command: bytes) -> set[int]:
        if not isinstance(group.matcher, re2.Set):
            return {group.indices[0]} if group.matcher.search(command) else set()
        # None when nothing matched: never here, as the empty pattern (index 0)
        # matches every text, unless the Set's DFA ran out of memory and said
        # nothing. Then match one by one (a single RE2 falls back to its NFA:
        # slower, still linear, never wrong).
        found = group.matcher.Match(command) or ()
        if 0 not in found:
            log.warning(
                "pattern set out of memory; matching one by one", patterns=len(group.indices)
            )
            own = tuple(patterns[i] for i in group.indices)
            return {group.indices[i] for i in self.one_by_one(own, command)}
        return {group.indices[i - 1] for i in found if i}

    @staticmethod
    def one_by_one(patterns: tuple[str, ...], command: bytes) -> set[int]:
        return {i for i, p in enumerate(patterns) if re2.compile(p, _OPTIONS).search(command)}

    def compiled(self, patterns: tuple[str, ...]) -> tuple[_Group, ...]:
        """`patterns` compiled (from the cache, or now)."""
        compiled = self.cached(patterns)
        if compiled is not None:
            return compiled
        compiled = compile_groups(patterns)
        with self._lock:
            if patterns not in self._sets:
                self._sets[patterns] = compiled
                self._groups += len(compiled)
            # The newest always stays, whatever its size.
            while self._groups > self._size and len(self._sets) > 1:
                _, evicted = self._sets.popitem(last=False)
                self._groups -= len(evicted)
        return compiled


def compile_groups(patterns: Sequence[str]) -> tuple[_Group, ...]:
    """`patterns` compiled in Sets of at most SET_PROGRAM_BUDGET instructions, in
    order (a pattern over the budget gets a Set of its own). PatternError names
    the first pattern that does not compile."""
    groups: list[_Group] = []
    chunk: list[int] = []
    total = 0
    for index, pattern in enumerate(patterns):
        try:
            size = program_size(pattern)
        except re2.error as exc:
            raise PatternError(index, _message(exc)) from None
        if chunk and total + size > SET_PROGRAM_BUDGET:
            groups += _compile_set(patterns, chunk)
            chunk, total = [], 0
        chunk.append(index)
        total += size
    if chunk:
        groups += _compile_set(patterns, chunk)
    return tuple(groups)


def _compile_set(patterns: Sequence[str], indices: list[int]) -> list[_Group]:
    compiled = re2.Set.SearchSet(_OPTIONS)
    compiled.Add("")
    for index in indices:
        try:
            compiled.Add(patterns[index])
        except re2.error:
            raise PatternError(index, _compile_error(patterns[index])) from None
    try:
        compiled.Compile()
    except re2.error:
        # Over RE2's memory budget after all (the sizes only estimate a Set's):
        # halve it; one pattern alone is matched by its own RE2, which compiled.
        log.warning("pattern set over its memory budget; split", patterns=len(indices))
        if len(indices) == 1:
            return [_Group((indices[0],), re2.compile(patterns[indices[0]], _OPTIONS))]
        half = len(indices) // 2
        return _compile_set(patterns, indices[:half]) + _compile_set(patterns, indices[half:])
    return [_Group(tuple(indices), compiled)]


def decide(rules: Sequence[Candidate], matched: set[int], project_id: str | None) -> Verdict:
    """The verdict of the rule tiers, given which of `rules` (oldest first) matched."""
    tiers: list[tuple[Tier, str]] = [("global", GLOBAL)]
    if project_id:
        tiers.insert(0, ("project", project_id))
    hits = [rules[i] for i in sorted(matched)]
    for tier, project in tiers:
        in_tier = [r for r in hits if r.project_id == project]
        for action in ("BLOCK", "ALLOW"):
            rule = next((r for r in in_tier if r.action == action), None)
            if rule is not None:
                verb = "blocked" if action == "BLOCK" else "allowed"
                reason = f"{verb} by {tier} rule {rule.id} ({rule.pattern})"
                return Verdict(action, tier, rule.id, reason)  # type: ignore[arg-type]
    return Verdict("PENDING", "none", None, "needs human confirmation: no rule matches")


# -- stores --------------------------------------------------------------------------

_RULE_COLUMNS = "id::text AS id, user_id, project_id, tool_name, pattern, action, created_at"


async def _rows(pool: AsyncConnectionPool, sql: str, params: dict[str, Any]) -> list[Rule]:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return [Rule(**row) for row in await cur.fetchall()]


class RuleLimitError(Exception):
    """One more rule would take its scope over a limit: a 422 naming `field`."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def scope_problem(stored: Sequence[str], pattern: str, project_id: str) -> RuleLimitError | None:
    """Why a scope whose rules have the patterns `stored` may not take one more
    rule with `pattern` (already a valid pattern), or None."""
    scope = "global rules" if project_id == GLOBAL else f"rules for project {project_id}"
    if len(stored) >= MAX_RULES_PER_SCOPE:
        return RuleLimitError(
            "project_id",
            f"the user has {len(stored)} {scope}, at most {MAX_RULES_PER_SCOPE}: delete some first",
        )
    total = program_size(pattern) + sum(_stored_size(p) for p in stored)
    if total > MAX_SCOPE_PROGRAM:
        return RuleLimitError(
            "pattern",
            f"too complex for this scope: with it the user's {scope} would need {total} "
            f"RE2 program instructions, at most {MAX_SCOPE_PROGRAM}",
        )
    return None


def _stored_size(pattern: str) -> int:
    try:
        return program_size(pattern)
    except re2.error:
        return 0  # written around the API; evaluation reports it


async def add_rule(
    pool: AsyncConnectionPool,
    app: str,
    user_id: str,
    project_id: str,
    tool_name: str,
    pattern: str,
    action: Action,
) -> Rule:
    """Insert the rule, or raise RuleLimitError and change nothing. The limits are
    checked in the insert's transaction under the scope's advisory lock, so two
    concurrent writes cannot both take the last place."""
    lock = json.dumps(["permission_rules", app, user_id, project_id])
    params = dict(
        app=app,
        user_id=user_id,
        project_id=project_id,
        tool_name=tool_name,
        pattern=pattern,
        action=action,
    )
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (lock,))
        cur = await conn.execute(
            "SELECT pattern FROM permission_rules "
            "WHERE app = %(app)s AND user_id = %(user_id)s AND project_id = %(project_id)s",
            params,
        )
        stored = [row[0] for row in await cur.fetchall()]
        problem = scope_problem(stored, pattern, project_id)
        if problem is not None:
            raise problem
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(
            "INSERT INTO permission_rules (app, user_id, project_id, tool_name, pattern, action) "
            "VALUES (%(app)s, %(user_id)s, %(project_id)s, %(tool_name)s, %(pattern)s, "
            f"%(action)s) RETURNING {_RULE_COLUMNS}",
            params,
        )
        row = await cur.fetchone()
    assert row is not None
    return Rule(**row)


async def list_rules(
    pool: AsyncConnectionPool, app: str, user_id: str, project_id: str | None
) -> list[Rule]:
    """The user's rules (of one project, or GLOBAL's, or all when None), oldest first."""
    where = "app = %(app)s AND user_id = %(user_id)s"
    if project_id is not None:
        where += " AND project_id = %(project_id)s"
    sql = (
        f"SELECT {_RULE_COLUMNS} FROM permission_rules WHERE {where} "
        "ORDER BY created_at, permission_rules.id"
    )
    return await _rows(pool, sql, {"app": app, "user_id": user_id, "project_id": project_id})


async def delete_rule(pool: AsyncConnectionPool, app: str, user_id: str, rule_id: str) -> bool:
    """Remove the rule `rule_id` if it is `user_id`'s in this app."""
    sql = (
        "DELETE FROM permission_rules "
        "WHERE id = %(id)s AND app = %(app)s AND user_id = %(user_id)s RETURNING id"
    )
    async with pool.connection() as conn:
        cur = await conn.execute(sql, {"id": rule_id, "app": app, "user_id": user_id})
        return await cur.fetchone() is not None


async def candidate_rules(
    pool: AsyncConnectionPool, app: str, user_id: str, project_id: str | None, tool_name: str
) -> tuple[Candidate, ...]:
    """Both tiers' rules for this tool (and for every tool), oldest first: one
    statement on the index (app, user_id, project_id, tool_name)."""
    sql = (
        "SELECT id::text, project_id, pattern, action FROM permission_rules "
        "WHERE app = %(app)s AND user_id = %(user_id)s AND project_id = ANY(%(projects)s) "
        "AND tool_name = ANY(%(tools)s) ORDER BY created_at, permission_rules.id"
    )
    params = {
        "app": app,
        "user_id": user_id,
        "projects": [GLOBAL, project_id] if project_id else [GLOBAL],
        "tools": sorted({tool_name, ANY_TOOL}),
    }
    async with pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(sql, params)
        return tuple(Candidate(*row) for row in await cur.fetchall())


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
class Candidates:
    """The rules that may decide a call (oldest first) and their patterns."""

    rules: tuple[Candidate, ...]
    patterns: tuple[str, ...]


class RuleCache:
    """Candidate rules per (app, user, project, tool), trusted for a few seconds
    (`AM_PERMISSION_CACHE_SECONDS`). This process's own writes clear it at once;
    another process's writes apply here within that time."""

    def __init__(self, size: int = RULE_CACHE_SIZE) -> None:
        self._size = size
        self._entries: OrderedDict[tuple[str, ...], tuple[float, Candidates]] = OrderedDict()
        self.generation = 0

    def get(self, key: tuple[str, ...], max_age: float) -> Candidates | None:
        entry = self._entries.get(key)
        if entry is None or time.monotonic() - entry[0] >= max_age:
            return None
        return entry[1]

    def put(self, key: tuple[str, ...], rules: Candidates, generation: int) -> None:
        # Read before a write of this process finished: not cached, it may be stale.
        if generation != self.generation:
            return
        self._entries[key] = (time.monotonic(), rules)
        self._entries.move_to_end(key)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()


# -- the guardrail -------------------------------------------------------------------


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
