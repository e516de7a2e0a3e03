"""Tool-permission routes: evaluate a tool call, grant one call, manage rules.

Everything is scoped by the request's tenant (`AppIdDep`). Evaluation never
answers 500: an error inside it is a PENDING with the reason (fail closed; see
shared/permissions.py). Rule writes clear this process's rule cache at once.
A rule is created within its scope's limits (else 422, nothing written) and
deleted only by its user (`user_id` is required: any key of the app may call
these routes, so a rule id alone must not reach another user's rule).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Query, Response

from services.api.deps import ApiDep, AppIdDep
from services.api.errors import ApiError, postgres_or_503, valkey_or_503
from services.api.models import Identifier, json_response
from services.api.permission_models import (
    GLOBAL_PROJECT,
    DeleteRuleResponse,
    EvaluateRequest,
    EvaluateResponse,
    GrantRequest,
    GrantResponse,
    RuleList,
    RuleRequest,
    RuleView,
)
from shared.config import Settings
from shared.events import format_time
from shared.identifiers import text_problem
from shared.permissions import (
    GLOBAL,
    Rule,
    RuleLimitError,
    ToolCall,
    add_grant,
    add_rule,
    canonical_json,
    command_of,
    delete_rule,
    grant_key,
    list_rules,
)

log = structlog.get_logger("agent_memory.api")
router = APIRouter()


@router.post("/v1/permissions:evaluate", response_model=EvaluateResponse)
async def evaluate(body: EvaluateRequest, app_id: AppIdDep, api: ApiDep) -> Response:
    settings = api.settings
    call = ToolCall(
        app=app_id,
        user_id=body.user_id,
        project_id=body.project_id,
        session_id=body.session_id,
        tool_name=body.tool_name,
        command=_command(body.tool_args, settings),
    )
    verdict = await api.guardrail.evaluate(
        call, settings.exempt_tools, api.apool, api.valkey, settings.permission_cache_seconds
    )
    # The audit trail of the guardrail (not the command: it may hold secrets).
    log.info(
        "permission evaluated",
        app=call.app,
        user=call.user_id,
        session=call.session_id,
        project=call.project_id,
        tool=call.tool_name,
        decision=verdict.decision,
        tier=verdict.tier,
        rule_id=verdict.rule_id,
    )
    # The fast path of services.api.models.json_response: the verdict has
    # EvaluateResponse's fields and is serialised as it is.
    return json_response(verdict)


@router.post("/v1/permissions/grants", status_code=201)
async def grant(body: GrantRequest, app_id: AppIdDep, api: ApiDep) -> GrantResponse:
    settings = api.settings
    command = _command(body.tool_args, settings)
    key = grant_key(app_id, body.user_id, body.session_id, body.tool_name, command)
    ttl = body.ttl_seconds or settings.permission_grant_ttl_seconds
    expires_at = await valkey_or_503(
        add_grant(api.valkey, key, ttl), "the grant store is unavailable"
    )
    return GrantResponse(
        user_id=body.user_id,
        session_id=body.session_id,
        tool_name=body.tool_name,
        command=command,
        expires_at=format_time(expires_at),
    )


@router.post("/v1/permissions/rules", status_code=201)
async def create_rule(body: RuleRequest, app_id: AppIdDep, api: ApiDep) -> RuleView:
    project = GLOBAL if body.project_id == GLOBAL_PROJECT else body.project_id
    try:
        rule = await postgres_or_503(
            add_rule(
                api.apool, app_id, body.user_id, project, body.tool_name, body.pattern, body.action
            )
        )
    except RuleLimitError as exc:
        raise ApiError(422, "invalid_request", str(exc), field=exc.field) from None
    api.guardrail.rules.clear()
    return _view(rule)


@router.get("/v1/permissions/rules")
async def get_rules(
    user_id: Annotated[Identifier, Query()],
    app_id: AppIdDep,
    api: ApiDep,
    project_id: Annotated[Identifier | None, Query()] = None,
) -> RuleList:
    project = GLOBAL if project_id == GLOBAL_PROJECT else project_id
    rules = await postgres_or_503(list_rules(api.apool, app_id, user_id, project))
    return RuleList(rules=[_view(r) for r in rules])


@router.delete("/v1/permissions/rules/{rule_id}")
async def remove_rule(
    rule_id: str,
    user_id: Annotated[Identifier, Query()],
    app_id: AppIdDep,
    api: ApiDep,
) -> DeleteRuleResponse:
    """Only the rule's own user deletes it: 404 for another user's rule."""
    if not _is_uuid(rule_id) or not await postgres_or_503(
        delete_rule(api.apool, app_id, user_id, rule_id)
    ):
        raise ApiError(404, "not_found", f"no permission rule {rule_id}")
    api.guardrail.rules.clear()
    return DeleteRuleResponse(id=rule_id, deleted=True)


def _command(tool_args: dict[str, Any], settings: Settings) -> str:
    """The call's command, or a 422 naming `tool_args` (too large, too deep, not UTF-8)."""
    try:
        canonical = canonical_json(tool_args)
        problem = text_problem(canonical, settings.max_tool_events_bytes)
    except (RecursionError, ValueError, TypeError):
        problem = "cannot be written as JSON text (too deep?)"
    if problem:
        raise ApiError(422, "invalid_request", f"tool_args: {problem}", field="tool_args")
    return command_of(tool_args, canonical)


def _view(rule: Rule) -> RuleView:
    return RuleView(
        id=rule.id,
        user_id=rule.user_id,
        project_id=rule.project_id or GLOBAL_PROJECT,
        tool_name=rule.tool_name,
        pattern=rule.pattern,
        action=rule.action,
        created_at=format_time(rule.created_at),
    )


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
