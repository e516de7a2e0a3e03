"""The tool-permission guardrail: may this agent run this tool call now?

An evaluation walks four tiers and stops at the first that decides:

1. exempt tools (`AM_PERMISSION_EXEMPT_TOOLS`): always ALLOW;
2. an allow-once grant for this app, user, session, tool and exact command,
   consumed with one GETDEL, so one grant allows exactly one call;
3. the user's rules for the project, then 4. the user's global rules (stored
   with project_id ''). Within a tier BLOCK beats ALLOW.

Nothing decides: PENDING (a human confirms). Any error (Valkey or Postgres
down, a stored pattern that does not compile, a match that takes too long) is
PENDING too: the guardrail fails closed, never open.

For speed, one process keeps the candidate rules of (app, user, project, tool)
for `AM_PERMISSION_CACHE_SECONDS` (its own rule writes clear them at once) and
the compiled sets keyed by their patterns.

The parts: `patterns` (RE2 patterns, their limits and compiled sets), `rules`
(the rules, their limits and the tiers' verdict), `guardrail` (grants and the
evaluation). Every name is importable from this package.
"""

from shared.permissions.guardrail import (
    COMPILE_TIMEOUT_SECONDS,
    MATCH_TIMEOUT_SECONDS,
    Guardrail,
    RuleError,
    SlowCompile,
    ToolCall,
    add_grant,
    consume_grant,
    grant_key,
)
from shared.permissions.patterns import (
    MAX_PATTERN_LENGTH,
    MAX_PATTERN_PROGRAM,
    PATTERN_SET_CACHE_SIZE,
    PROGRAM_SIZE_CACHE_SIZE,
    SET_PROGRAM_BUDGET,
    PatternError,
    PatternSets,
    canonical_json,
    command_of,
    compile_groups,
    pattern_problem,
    program_size,
)
from shared.permissions.rules import (
    ANY_TOOL,
    GLOBAL,
    MAX_RULES_PER_SCOPE,
    MAX_SCOPE_PROGRAM,
    RULE_CACHE_SIZE,
    Action,
    Candidate,
    Candidates,
    Decision,
    Rule,
    RuleCache,
    RuleLimitError,
    Tier,
    Verdict,
    add_rule,
    candidate_rules,
    decide,
    delete_rule,
    list_rules,
    scope_problem,
)

__all__ = [
    "ANY_TOOL",
    "COMPILE_TIMEOUT_SECONDS",
    "GLOBAL",
    "MATCH_TIMEOUT_SECONDS",
    "MAX_PATTERN_LENGTH",
    "MAX_PATTERN_PROGRAM",
    "MAX_RULES_PER_SCOPE",
    "MAX_SCOPE_PROGRAM",
    "PATTERN_SET_CACHE_SIZE",
    "PROGRAM_SIZE_CACHE_SIZE",
    "RULE_CACHE_SIZE",
    "SET_PROGRAM_BUDGET",
    "Action",
    "Candidate",
    "Candidates",
    "Decision",
    "Guardrail",
    "PatternError",
    "PatternSets",
    "Rule",
    "RuleCache",
    "RuleError",
    "RuleLimitError",
    "SlowCompile",
    "Tier",
    "ToolCall",
    "Verdict",
    "add_grant",
    "add_rule",
    "canonical_json",
    "candidate_rules",
    "command_of",
    "compile_groups",
    "consume_grant",
    "decide",
    "delete_rule",
    "grant_key",
    "list_rules",
    "pattern_problem",
    "program_size",
    "scope_problem",
]
