"""The API's routes, one `APIRouter` per resource (services.api.app includes them)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from starlette.routing import BaseRoute


def every_route(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """`routes` with each included router's own routes in its place, in order:
    FastAPI keeps an included router as one node, which has no path or methods
    (the API's routers are included without a prefix, so their paths are whole)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is None:
            yield route
        else:
            yield from every_route(included.routes)
