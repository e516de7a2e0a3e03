"""Profiles: the app's profile schema (`/v1/config/profile`; anyone of the app reads
it, its admin key changes it) and a user's profile, read without a search, set
by the extraction and by `PATCH` (shared.profiles)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Path

from services.api.deps import AdminDep, Api, ApiDep, AppIdDep, CallerDep
from services.api.errors import ApiError, postgres_or_503
from services.api.models import Identifier
from services.api.profile_models import (
    Profile,
    ProfileConfig,
    ProfileHistory,
    ProfilePatch,
    ProfileRevision,
    ProfileRollback,
)
from services.api.routers.app_config import read_setting, write_setting
from shared.db.profiles import ProfileValueRow, profile_of
from shared.db.unit_of_work import UnitsOfWork, in_thread
from shared.events import format_time, utcnow
from shared.profiles.rollback import history, rollback_field
from shared.profiles.schema import PROFILE_SETTING
from shared.profiles.writing import ProfileRefused, patch_profile

router = APIRouter()

# A user's id may hold `/` (the route's `path` convertor takes it whole).
PathId = Annotated[Identifier, Path()]


@router.get("/v1/config/profile", response_model=ProfileConfig)
async def get_profile_schema(app_id: AppIdDep, api: ApiDep) -> ProfileConfig:
    return ProfileConfig.model_validate(await read_setting(api, app_id, PROFILE_SETTING) or {})


@router.put("/v1/config/profile", response_model=ProfileConfig)
async def put_profile_schema(
    body: ProfileConfig, admin: AdminDep, app_id: AppIdDep, api: ApiDep
) -> ProfileConfig:
    """Replace the schema. Values of the fields it still names stay; those of fields
    it drops are no longer read or written (a later schema naming them again finds
    them), until the user is deleted."""
    refusal = "the profile schema needs an admin key of this app"
    await write_setting(api, app_id, PROFILE_SETTING, body.model_dump(), admin, refusal)
    return body


@router.get("/v1/users/{user_id:path}/profile", response_model=Profile)
async def get_profile(user_id: PathId, app_id: AppIdDep, api: ApiDep) -> dict[str, Any]:
    """The user's profile (no search: one read). Only the fields the schema names."""

    rows = await postgres_or_503(
        in_thread(api.pool, lambda uow: uow.run(profile_of(app_id, user_id)), commit=False)
    )
    return profile_body(user_id, rows)


@router.patch("/v1/users/{user_id:path}/profile", response_model=Profile)
async def patch_user_profile(
    user_id: PathId, body: ProfilePatch, app_id: AppIdDep, caller: CallerDep, api: ApiDep
) -> dict[str, Any]:
    """Set the named fields (null clears one) as revisions whose source is the
    caller; all or nothing. A value equal to the current one writes nothing."""
    return await _changed(api, patch_profile, app_id, user_id, body.values, caller)


@router.post("/v1/users/{user_id:path}/profile:rollback", response_model=Profile)
async def rollback_profile(
    user_id: PathId, body: ProfileRollback, app_id: AppIdDep, caller: CallerDep, api: ApiDep
) -> dict[str, Any]:
    """Make a field's revision N value current again (a cleared one: the field is
    cleared), as a new revision whose source is the caller; the history stays."""
    what = (body.field, body.revision)
    return await _changed(api, rollback_field, app_id, user_id, *what, caller)


async def _changed(
    api: Api, change: Callable[..., list[ProfileValueRow]], app: str, user_id: str, *what: Any
) -> dict[str, Any]:
    """`change(units, app, user, *what, now)` on a worker thread; its refusals as the
    API's errors; the profile after."""
    units = UnitsOfWork(api.pool, "api")
    try:
        rows = await postgres_or_503(
            asyncio.to_thread(change, units, app, user_id, *what, utcnow())
        )
    except ProfileRefused as exc:
        code = {404: "not_found", 409: "conflict"}.get(exc.status, "invalid_request")
        raise ApiError(exc.status, code, f"{exc.field}: {exc}", field=exc.field) from None
    return profile_body(user_id, rows)


@router.get("/v1/users/{user_id:path}/profile/revisions", response_model=ProfileHistory)
async def get_profile_revisions(user_id: PathId, app_id: AppIdDep, api: ApiDep) -> ProfileHistory:
    """Every change of the user's profile, applied or not, oldest first."""
    rows = await postgres_or_503(
        in_thread(api.pool, lambda uow: uow.profiles.revisions(app_id, user_id), commit=False)
    )
    return ProfileHistory(
        user_id=user_id,
        revisions=[
            ProfileRevision.model_validate(
                asdict(r)
                | {
                    "revision": number,
                    "observed_at": format_time(r.observed_at),
                    "created_at": format_time(r.created_at),
                }
            )
            for r, number in history(rows)
        ],
    )


def profile_body(user_id: str, rows: list[ProfileValueRow]) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "values": {row.field: row.value for row in rows},
        "fields": [
            {
                "name": row.field,
                "value": row.value,
                "observed_at": format_time(row.observed_at),
                "updated_at": format_time(row.updated_at),
                "source": row.source,
            }
            for row in rows
        ],
    }
