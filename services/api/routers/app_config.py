"""An app's settings: its memories' time-to-live (`/v1/config/ttl`), what the
extraction keeps (`/v1/config/extraction`) and what its agents share with the
user (`/v1/config/agents`). Anyone of the app reads them; only its admin key
changes them. A change reaches every process of the app at once: each write and
each extraction reads them anew."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from services.api.config_models import AgentsConfig, ExtractionConfig, TtlConfig
from services.api.deps import AdminDep, Api, ApiDep, AppIdDep
from services.api.errors import ApiError, postgres_or_503
from shared.db.unit_of_work import UnitOfWork, in_thread
from shared.llm import topics
from shared.llm.topics import EXTRACTION_SETTING, MANAGED
from shared.memory.agents import AGENTS_SETTING
from shared.memory.expiry import TTL_SETTING

router = APIRouter()


async def read_setting(api: Api, app_id: str, name: str) -> dict[str, Any] | None:
    """The app's setting `name` as stored (None: never set)."""
    return await postgres_or_503(
        in_thread(api.pool, lambda uow: uow.app_settings.get(app_id, name), commit=False)
    )


async def write_setting(
    api: Api, app_id: str, name: str, stored: dict[str, Any], admin: bool, refusal: str
) -> None:
    """Replace the app's setting `name`; a key that is not the app's admin key is
    refused with `refusal` (403)."""
    if not admin:
        raise ApiError(403, "forbidden", refusal)

    def put(uow: UnitOfWork) -> None:
        uow.app_settings.put(app_id, name, stored)

    await postgres_or_503(in_thread(api.pool, put, commit=True))


@router.get("/v1/config/ttl", response_model=TtlConfig)
async def get_ttl(app_id: AppIdDep, api: ApiDep) -> TtlConfig:
    return TtlConfig.model_validate(await read_setting(api, app_id, TTL_SETTING) or {})


@router.put("/v1/config/ttl", response_model=TtlConfig)
async def put_ttl(body: TtlConfig, admin: AdminDep, app_id: AppIdDep, api: ApiDep) -> TtlConfig:
    """Replace the app's TTLs. They apply to what is written from now on: a memory
    keeps the expiry it was given (an update by the extraction moves it)."""
    stored = body.model_dump(exclude_none=True)
    refusal = "the app's TTLs need an admin key of this app"
    await write_setting(api, app_id, TTL_SETTING, stored, admin, refusal)
    return TtlConfig.model_validate(stored)


@router.get("/v1/config/extraction", response_model=ExtractionConfig)
async def get_extraction(app_id: AppIdDep, api: ApiDep) -> ExtractionConfig:
    stored = await read_setting(api, app_id, EXTRACTION_SETTING)
    return ExtractionConfig.model_validate(stored or {})


@router.put("/v1/config/extraction", response_model=ExtractionConfig)
async def put_extraction(
    body: ExtractionConfig, admin: AdminDep, app_id: AppIdDep, api: ApiDep
) -> ExtractionConfig:
    """Replace what the extraction keeps; it applies to the windows extracted from now."""
    refusal = "the extraction topics need an admin key of this app"
    await write_setting(api, app_id, EXTRACTION_SETTING, body.model_dump(), admin, refusal)
    return body


@router.get("/v1/config/agents", response_model=AgentsConfig)
async def get_agents(app_id: AppIdDep, api: ApiDep) -> AgentsConfig:
    return AgentsConfig.model_validate(await read_setting(api, app_id, AGENTS_SETTING) or {})


@router.put("/v1/config/agents", response_model=AgentsConfig)
async def put_agents(
    body: AgentsConfig, admin: AdminDep, app_id: AppIdDep, api: ApiDep
) -> AgentsConfig:
    """Replace what the app's agents share with the user; it applies to the windows
    extracted from now (a memory keeps the owner it was made with)."""
    refusal = "the agents' sharing needs an admin key of this app"
    if admin:  # a key that may not change the setting is refused before it learns more
        known = await _topics(api, app_id)
        for i, topic in enumerate(body.shared_topics):
            if topic not in known:
                field = f"shared_topics.{i}"
                message = (
                    f"{field}: {topic!r} is no topic of this app (its topics: "
                    f"{', '.join(known)}; a custom one is added by PUT /v1/config/extraction)"
                )
                raise ApiError(422, "invalid_request", message, field=field)
    await write_setting(api, app_id, AGENTS_SETTING, body.model_dump(), admin, refusal)
    return body


async def _topics(api: Api, app_id: str) -> tuple[str, ...]:
    """The topics the extraction may give a memory of the app: every managed one
    (those the app does not choose now it may choose later) and its custom ones."""
    custom = topics.of_setting(await read_setting(api, app_id, EXTRACTION_SETTING)).custom
    return (*MANAGED, *(topic.name for topic in custom))
