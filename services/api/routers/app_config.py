"""An app's settings: its memories' time-to-live (`/v1/config/ttl`) and what the
extraction keeps (`/v1/config/extraction`). Anyone of the app reads them; only its
admin key changes them. A change reaches every process of the app at once: each
write and each extraction reads them anew."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.config_models import ExtractionConfig, TtlConfig
from services.api.deps import AdminDep, ApiDep, AppIdDep
from services.api.errors import ApiError, postgres_or_503
from shared.db.unit_of_work import UnitOfWork, in_thread
from shared.llm.topics import EXTRACTION_SETTING
from shared.memory.expiry import TTL_SETTING

router = APIRouter()


@router.get("/v1/config/ttl", response_model=TtlConfig)
async def get_ttl(app_id: AppIdDep, api: ApiDep) -> TtlConfig:
    stored = await postgres_or_503(
        in_thread(api.pool, lambda uow: uow.app_settings.get(app_id, TTL_SETTING), commit=False)
    )
    return TtlConfig.model_validate(stored or {})


@router.put("/v1/config/ttl", response_model=TtlConfig)
async def put_ttl(body: TtlConfig, admin: AdminDep, app_id: AppIdDep, api: ApiDep) -> TtlConfig:
    """Replace the app's TTLs. They apply to what is written from now on: a memory
    keeps the expiry it was given (an update by the extraction moves it)."""
    if not admin:
        raise ApiError(403, "forbidden", "the app's TTLs need an admin key of this app")
    stored = body.model_dump(exclude_none=True)

    def put(uow: UnitOfWork) -> None:
        uow.app_settings.put(app_id, TTL_SETTING, stored)

    await postgres_or_503(in_thread(api.pool, put, commit=True))
    return TtlConfig.model_validate(stored)


@router.get("/v1/config/extraction", response_model=ExtractionConfig)
async def get_extraction(app_id: AppIdDep, api: ApiDep) -> ExtractionConfig:
    stored = await postgres_or_503(
        in_thread(
            api.pool, lambda uow: uow.app_settings.get(app_id, EXTRACTION_SETTING), commit=False
        )
    )
    return ExtractionConfig.model_validate(stored or {})


@router.put("/v1/config/extraction", response_model=ExtractionConfig)
async def put_extraction(
    body: ExtractionConfig, admin: AdminDep, app_id: AppIdDep, api: ApiDep
) -> ExtractionConfig:
    """Replace what the extraction keeps; it applies to the windows extracted from now."""
    if not admin:
        raise ApiError(403, "forbidden", "the extraction topics need an admin key of this app")
    stored = body.model_dump()

    def put(uow: UnitOfWork) -> None:
        uow.app_settings.put(app_id, EXTRACTION_SETTING, stored)

    await postgres_or_503(in_thread(api.pool, put, commit=True))
    return body
