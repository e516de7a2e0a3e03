"""The API's documentation pages, `/docs` (Swagger UI) and `/redoc`, served offline.

FastAPI's own pages load their scripts, CSS, favicon and (Redoc) Google Fonts from
CDNs, so they show nothing without the internet. These pages load the same
scripts from the API itself, from the copies the `fastapi-offline` package ships
(swagger-ui-dist and Redoc's standalone bundle), and name no other host.

Build the app with `FastAPI(..., docs_url=None, redoc_url=None)` and call
`install_docs(app)`. Authentication protects `/v1/` only, so these pages and their
assets need no key, as before.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
ASSETS_URL = "/docs-assets"

SWAGGER_JS = "swagger-ui-bundle.js"
SWAGGER_CSS = "swagger-ui.css"
REDOC_JS = "redoc.standalone.js"
FAVICON = "favicon.png"

# The browser loads nothing from another host, not even what the bundles fetch by
# themselves (Redoc's sidebar logo comes from its CDN). 'unsafe-inline': FastAPI's
# pages start the bundles with an inline script, and both bundles set inline styles.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "worker-src 'self' blob:",
        "connect-src 'self'",  # "Try it out" calls this API, and no other
    ]
)


def assets_dir() -> Path:
    """Where the installed `fastapi-offline` keeps the bundles."""
    return Path(str(files("fastapi_offline") / "static"))


def install_docs(app: FastAPI) -> None:
    """Serve the assets under `/docs-assets` and register `/docs`, its OAuth2
    redirect page and `/redoc`, none of them in the OpenAPI schema."""
    if app.docs_url is not None or app.redoc_url is not None:
        # FastAPI registered its CDN pages in its constructor; they would answer first.
        raise ValueError("build the app with FastAPI(docs_url=None, redoc_url=None)")
    if app.openapi_url is None:
        return  # no schema, nothing to show (as FastAPI does)
    openapi_url = app.openapi_url
    directory = assets_dir()
    missing = [
        name
        for name in (SWAGGER_JS, SWAGGER_CSS, REDOC_JS, FAVICON)
        if not (directory / name).is_file()
    ]
    if missing:
        # Fail at startup, not as blank pages, if a new release moves its files.
        raise RuntimeError(f"fastapi-offline ships no {', '.join(missing)} in {directory}")
    app.mount(ASSETS_URL, StaticFiles(directory=directory), name="docs-assets")
    oauth2_redirect_url = app.swagger_ui_oauth2_redirect_url

    async def swagger_ui(request: Request) -> HTMLResponse:
        root = _root_path(request)
        assets = root + ASSETS_URL
        page = get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{assets}/{SWAGGER_JS}",
            swagger_css_url=f"{assets}/{SWAGGER_CSS}",
            swagger_favicon_url=f"{assets}/{FAVICON}",
            oauth2_redirect_url=root + oauth2_redirect_url if oauth2_redirect_url else None,
            init_oauth=app.swagger_ui_init_oauth,
            # The validator badge would load an image from validator.swagger.io
            # (telling it the schema's URL); the app's own parameters still win.
            swagger_ui_parameters={"validatorUrl": None, **(app.swagger_ui_parameters or {})},
        )
        return _confined(page)

    async def redoc(request: Request) -> HTMLResponse:
        root = _root_path(request)
        page = get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_URL}/{REDOC_JS}",
            redoc_favicon_url=f"{root}{ASSETS_URL}/{FAVICON}",
            with_google_fonts=False,  # its fallback fonts are the system's
        )
        return _confined(page)

    app.add_route(DOCS_URL, swagger_ui, include_in_schema=False)
    if oauth2_redirect_url:

        async def swagger_ui_redirect(request: Request) -> HTMLResponse:
            return _confined(get_swagger_ui_oauth2_redirect_html())

        app.add_route(oauth2_redirect_url, swagger_ui_redirect, include_in_schema=False)
    app.add_route(REDOC_URL, redoc, include_in_schema=False)


def _root_path(request: Request) -> str:
    """The prefix a proxy mounts the API under, as FastAPI's own pages use it."""
    return request.scope.get("root_path", "").rstrip("/")


def _confined(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return page
