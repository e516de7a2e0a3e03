"""Liveness and readiness checks: open to every caller, outside `/v1`."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from services.api.deps import ApiDep
from services.api.health import readiness

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(api: ApiDep) -> JSONResponse:
    # 503 names each dependency that did not answer; the reasons go to the log only.
    checks = await readiness(api.pool, api.publisher, api.valkey)
    down = sorted(name for name, ok in checks.items() if not ok)
    body = {"status": "unavailable" if down else "ready", "down": down}
    return JSONResponse(status_code=503 if down else 200, content=body)
