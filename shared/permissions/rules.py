"""Permission rules: the limits a scope's rules keep, writing and reading them
(`shared.db.permission_rules`), the cache of each call's candidates, and the
tiers' verdict.

A user's rules for the project decide first, then the user's global rules
(stored with project_id ""). Within a tier BLOCK beats ALLOW.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import re2
from psycopg_pool import AsyncConnectionPool

from shared.db.permission_rules import Action, Candidate, NewRule, PermissionRules, Rule
from shared.permissions.patterns import program_size

Decision = Literal["ALLOW", "BLOCK", "PENDING"]
Tier = Literal["exempt", "allow_once", "project", "global", "none"]

GLOBAL = ""  # the project_id of global rules in the table
ANY_TOOL = "*"  # a rule for every tool
# Rules of one scope (a user's rules of one project, or their global rules).
# Generous: bench/permissions.py gives one user 700 project and 300 global rules.
MAX_RULES_PER_SCOPE = 1000
# RE2 program instructions of a scope's patterns together (1,000 rules of 250; a
# typical rule is under 50). A call's candidates come from two scopes, so they
# are at most 2,000 rules or 500,000 instructions, which compile well within the
# guardrail's COMPILE_TIMEOUT_SECONDS.
MAX_SCOPE_PROGRAM = 250_000
RULE_CACHE_SIZE = 10_000

__all__ = [
    "ANY_TOOL",
    "GLOBAL",
    "MAX_RULES_PER_SCOPE",
    "MAX_SCOPE_PROGRAM",
    "Action",
    "Candidate",
    "Candidates",
    "Decision",
    "Rule",
    "RuleCache",
    "RuleLimitError",
    "Tier",
    "Verdict",
    "add_rule",
    "candidate_rules",
    "decide",
    "delete_rule",
    "list_rules",
    "scope_problem",
]


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    tier: Tier
    rule_id: str | None
    reason: str


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
                return Verdict(action, tier, rule.id, reason)
    return Verdict("PENDING", "none", None, "needs human confirmation: no rule matches")


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
    async with pool.connection() as conn, conn.transaction():
        rules = PermissionRules(conn)
        await rules.lock_scope(app, user_id, project_id)
        stored = await rules.patterns_of_scope(app, user_id, project_id)
        problem = scope_problem(stored, pattern, project_id)
        if problem is not None:
            raise problem
        return await rules.insert(NewRule(app, user_id, project_id, tool_name, pattern, action))


async def list_rules(
    pool: AsyncConnectionPool, app: str, user_id: str, project_id: str | None
) -> list[Rule]:
    """The user's rules (of one project, or GLOBAL's, or all when None), oldest first."""
    async with pool.connection() as conn:
        return await PermissionRules(conn).of_user(app, user_id, project_id)


async def delete_rule(pool: AsyncConnectionPool, app: str, user_id: str, rule_id: str) -> bool:
    """Remove the rule `rule_id` if it is `user_id`'s in this app."""
    async with pool.connection() as conn:
        return await PermissionRules(conn).delete(app, user_id, rule_id)


async def candidate_rules(
    pool: AsyncConnectionPool, app: str, user_id: str, project_id: str | None, tool_name: str
) -> tuple[Candidate, ...]:
    """Both tiers' rules for this tool (and for every tool), oldest first."""
    projects = [GLOBAL, project_id] if project_id else [GLOBAL]
    async with pool.connection() as conn:
        return await PermissionRules(conn).candidates(
            app, user_id, projects, sorted({tool_name, ANY_TOOL})
        )


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
