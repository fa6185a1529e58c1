"""Routes: plain functions from a request path to a status and a JSON body."""

from __future__ import annotations

import os
from collections.abc import Callable

from service import RELEASE

Response = tuple[int, dict[str, object]]


def deployed_commit() -> str:
    """The commit being served: the deploy sets ``APP_VERSION``; "dev" elsewhere."""
    return os.environ.get("APP_VERSION", "dev")


def health() -> Response:
    return 200, {"status": "ok", "version": deployed_commit()}


def index() -> Response:
    return 200, {"service": "webapp", "release": RELEASE}


ROUTES: dict[str, Callable[[], Response]] = {"/": index, "/health": health}


def handle(path: str) -> Response:
    """The response for ``GET path``."""
    route = ROUTES.get(path)
    if route is None:
        return 404, {"error": f"no route for {path}"}
    return route()
