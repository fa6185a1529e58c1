"""GET/POST /login and POST /logout: a browser signs in once with a token.

The form posts ``token`` (the API token for a write session, the read token
for a read-only one) and ``next``; on success the answer is a 303 to ``next``
(a local path) with the session cookie (``pipeline.http.session``).
"""

from __future__ import annotations

from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from pipeline.http.common import BodyTooLarge, context, read_bounded
from pipeline.http.dashboard import render
from pipeline.http.session import cookie_header, issue_cookie, role_of_token, safe_next

MAX_FORM = 8 * 1024


def _page(status: int, next_path: str, message: str, request: Request) -> Response:
    http = context(request).settings.http
    if not (http.api_token.configured or http.read_token.configured):
        message = (
            "No token is configured, so there is nothing to sign in with: set "
            "[http] api_token_env (and optionally read_token_env) in the config."
        )
    return render("login.html", status, next=safe_next(next_path), message=message, nav="")


def login_page(request: Request) -> Response:
    """GET /login: the sign-in form."""
    return _page(200, request.query_params.get("next", "/"), "", request)


async def login(request: Request) -> Response:
    """POST /login: a right token sets the session cookie and goes on to ``next``.

    Anyone may post here, so the form is read only up to ``MAX_FORM`` bytes: a
    larger body is refused (413) as it arrives, never held whole in memory; a
    form with more fields than the sign-in form's is refused (400).
    """
    try:
        raw = await read_bounded(request, MAX_FORM)
    except BodyTooLarge:
        return _page(413, "/", f"The sign-in form is larger than {MAX_FORM} bytes.", request)
    try:
        form = parse_qs(raw.decode("utf-8", "replace"), max_num_fields=8)
    except ValueError:  # more fields than the form has
        return _page(400, "/", "The sign-in form has fields it does not know.", request)
    token = (form.get("token") or [""])[0].strip()
    next_path = safe_next((form.get("next") or ["/"])[0])
    http = context(request).settings.http
    role = role_of_token(http, token) if token else None
    if role is None:
        return _page(401, next_path, "That token is not the API token or the read token.", request)
    response = RedirectResponse(next_path, status_code=303)
    response.headers["Set-Cookie"] = cookie_header(http, issue_cookie(http, role))
    return response


def logout(request: Request) -> Response:
    """POST /logout: forget the session cookie in this browser."""
    response = RedirectResponse("/login", status_code=303)
    response.headers["Set-Cookie"] = cookie_header(context(request).settings.http, "", clear=True)
    return response
