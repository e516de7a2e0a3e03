"""A user's profile in the console: the app's fields with the user's values (and
where each came from), shown on the user's page, and a form that sets or clears
them through the API (`PATCH /v1/users/{id}/profile`) as the signed-in key."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from services.console import access, inputs
from services.console.pages import client
from shared.client.models import Profile, ProfileConfig

router = APIRouter(include_in_schema=False)
PROFILE = f"{access.PREFIX}/user/profile"


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
    target = f"{access.PREFIX}/user?{urlencode({'id': user_id})}#profile"
    return RedirectResponse(target, status_code=303)
