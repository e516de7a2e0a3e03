"""Request and response bodies of the tool-permission routes.

Identifiers follow the API's one rule (`check_identifier`); a pattern must be
one RE2 compiles, within MAX_PATTERN_LENGTH and MAX_PATTERN_PROGRAM, checked
when the rule is written, so a bad pattern is a 422 naming `pattern`, not a
surprise at evaluation (the limits of a whole scope need its stored rules: the
store checks them). The size of `tool_args` is checked by the routes (the limit
is a setting).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, WithJsonSchema

from services.api.memory_models import Identifier, OptionalId
from services.api.models import RequestBody, example, json_integer
from shared.permissions import (
    MAX_PATTERN_LENGTH,
    MAX_PATTERN_PROGRAM,
    Action,
    Decision,
    Tier,
    pattern_problem,
)

# Rules of every project of the user: `project_id` of a rule, or in a listing.
GLOBAL_PROJECT = "global"


def _pattern(value: str) -> str:
    problem = pattern_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# What a schema can say of it; that RE2 compiles it within the limits, only RE2 can.
PATTERN_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_PATTERN_LENGTH,
    "pattern": "^[^\\u0000]*$",  # no NUL, which the API refuses
    # No `format: regex`: that is ECMA-262's syntax, and RE2's is not the same.
    "description": "An RE2 pattern, matched against the command (no back-references or "
    f"lookarounds; at most {MAX_PATTERN_PROGRAM} RE2 instructions).",
}
Pattern = Annotated[str, AfterValidator(_pattern), WithJsonSchema(PATTERN_SCHEMA)]


class _ToolCall(RequestBody):
    user_id: Identifier
    session_id: Identifier
    tool_name: Identifier
    tool_args: dict[str, Any]


class EvaluateRequest(_ToolCall):
    model_config = example(
        {
            "user_id": "u-42",
            "session_id": "s-7",
            "tool_name": "run_shell",
            "tool_args": {"command": "rm -rf /"},
        }
    )

    project_id: OptionalId = None


class EvaluateResponse(BaseModel):
    decision: Decision
    tier: Tier
    rule_id: str | None
    reason: str


class GrantRequest(_ToolCall):
    # Unset: AM_PERMISSION_GRANT_TTL_SECONDS.
    ttl_seconds: Annotated[int, Field(ge=1, le=3600), BeforeValidator(json_integer)] | None = None


class GrantResponse(BaseModel):
    user_id: str
    session_id: str
    tool_name: str
    command: str
    expires_at: str


class RuleRequest(RequestBody):
    user_id: Identifier
    project_id: Identifier  # a project, or "global" for every project of the user
    tool_name: Identifier  # "*": every tool
    pattern: Pattern
    action: Action


class RuleView(BaseModel):
    id: str
    user_id: str
    project_id: str  # "global" for a global rule
    tool_name: str
    pattern: str
    action: Literal["ALLOW", "BLOCK"]
    created_at: str


class RuleList(BaseModel):
    rules: list[RuleView]


class DeleteRuleResponse(BaseModel):
    id: str
    deleted: bool
