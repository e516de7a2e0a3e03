"""A user's profile in the console: the app's fields with the user's values (and
where each came from), shown on the user's page with their history, a form that
sets or clears them through the API (`PATCH /v1/users/{id}/profile`) as the
signed-in key, and a field's rollback to an earlier revision, confirmed first."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from services.console import access, inputs
from services.console.pages import client, page
from shared.client.models import Profile, ProfileConfig

router = APIRouter(include_in_schema=False)
PROFILE = f"{access.PREFIX}/user/profile"
MAX_FIELD_NAME = 40  # the schema's longest field name


def _typed(field: dict[str, Any], raw: str) -> Any:
    """A form's text as the field's value (None: cleared); Refused when it is not one."""
    if not raw:
        return None
    if field["type"] == "number":
        try:
            number = float(raw)
        except ValueError:
            raise access.Refused(422, f"{field['name']}: must be a number") from None
        return int(number) if number.is_integer() else number
    if field["type"] == "boolean":
        if raw not in ("true", "false"):
            raise access.Refused(422, f"{field['name']}: must be true or false")
        return raw == "true"
    return raw


def changes(schema: ProfileConfig, profile: Profile, form: Any) -> dict[str, Any]:
    """The fields whose value the form changes, by name."""
    changed = {}
    for field in schema.model_dump()["fields"]:
        name = field["name"]
        value = _typed(field, inputs.text(form, f"field.{name}", limit=200).strip())
        if value != profile.values.get(name):
            changed[name] = value
    return changed


@router.post(PROFILE)
async def save_profile(request: Request) -> Response:
    form = await access.checked_form(request)
    user_id = inputs.identifier(form, "user")
    async with client(request) as api:
        schema, profile = await api.profile_schema(), await api.profile(user_id)
        changed = changes(schema, profile, form)
        if changed:
            await api.update_profile(user_id, changed)
    # Back to the user's page, at the profile, which shows the values saved.
    return RedirectResponse(_user_page(user_id, "profile"), status_code=303)


@router.post(PROFILE + "/rollback")
async def rollback_profile(request: Request) -> Response:
    form = await access.checked_form(request)
    user_id = inputs.identifier(form, "user")
    field = inputs.text(form, "field", required=True, limit=MAX_FIELD_NAME).strip()
    revision = inputs.number(form, "revision")
    if form.get("confirm") != "yes":
        # Asked first, on a page of its own: it works without scripts.
        async with client(request) as api:
            profile, history = await api.profile(user_id), await api.profile_revisions(user_id)
        chosen = [r for r in history.revisions if (r.field, r.revision) == (field, revision)]
        if not chosen:
            raise access.Refused(404, f"revision: no revision {revision} of field {field!r}")
        now = profile.values.get(field)
        return page(request, "profile_rollback.html", user_id=user_id, revision=chosen[0], now=now)
    async with client(request) as api:
        await api.rollback_profile(user_id, field, revision)
    # Back to the history, which ends with the rollback's revision.
    return RedirectResponse(_user_page(user_id, "profile-history"), status_code=303)


def _user_page(user_id: str, at: str) -> str:
    return f"{access.PREFIX}/user?{urlencode({'id': user_id})}#{at}"
