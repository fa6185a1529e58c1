"""The HTTP edge the three remote trackers share: errors, rate limits, ETags, pacing.

Every forge call goes through ``ForgeHttp`` so the failure policy is written once:

- network errors and timeouts -> ``RetryableError("network")``; 5xx ->
  ``RetryableError("forge_5xx")``; a body that is not JSON ->
  ``RetryableError("forge_bad_response")`` naming the URL;
- 429, or 403 with ``retry-after`` / an exhausted ``x-ratelimit-remaining`` / a "rate
  limit" message (GitHub's secondary limits) -> ``RetryableError("forge_rate_limited",
  retry_after_s=...)``; every call is then refused, without touching the network, until then;
- 401 -> ``FatalError("forge_auth")``, unless the token's source now holds another token
  (rotated, ``token.py``): the call is then made once more with it;
- 404, and 410 (GitHub's deleted issue) -> ``FatalError`` of the caller's kind.

Conditional GETs keep the last ETag and page per URL, so an unchanged list
costs a 304 (free of rate limit on GitHub). Asking again for a page held is a
poll cycle's hot path: it goes straight through the lean transport
(``transport.py``) with the headers recorded with the page. Mutations are
serialised by one lock and spaced ``mutation_spacing_s`` apart, as GitHub's best
practices ask. The token lives in the default headers of the ``httpx.Client``
and in those recorded headers, never in a URL, a message or a ``repr``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import httpx

from pipeline.core.errors import FatalError, RetryableError
from pipeline.trackers.answers import error_message, looks_rate_limited, parse_retry_after
from pipeline.trackers.token import TokenHeader
from pipeline.trackers.transport import LeanTransport, lean_transport

Params = Mapping[str, str]
T = TypeVar("T")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
NextRequest = Callable[["Page", Params], "tuple[str, Params] | None"]


@dataclass(frozen=True)
class HttpOptions:
    """Knobs tests and operators turn; ``clock`` is wall time (resets are epochs)."""

    timeout_s: float = 30.0
    mutation_spacing_s: float = 1.0
    default_rate_wait_s: float = 60.0  # GitHub: wait a minute when no header says
    max_pages: int = 100
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    user_agent: str = "afk-pipeline"


@dataclass(frozen=True)
class Page:
    """One decoded response: its JSON, headers and the URL it came from."""

    data: Any
    headers: httpx.Headers
    url: str


@dataclass
class _Cached:
    etag: str
    page: Page
    request_headers: tuple[tuple[bytes, bytes], ...] = field(repr=False)  # asked for ``page``


@dataclass
class _State:
    not_before: float = 0.0
    last_mutation: float | None = None
    # Keyed by (path, params): an unchanged list is asked for again without re-parsing its URL.
    etags: dict[tuple[str, tuple[tuple[str, str], ...]], _Cached] = field(default_factory=dict)
    urls: dict[tuple[str, tuple[tuple[str, str], ...]], httpx.URL] = field(default_factory=dict)


class ForgeHttp:
    """A forge API client: base URL, auth headers and the failure policy above."""

    def __init__(
        self,
        forge: str,
        base_url: str,
        headers: Mapping[str, str],
        *,
        auth: TokenHeader | None = None,
        options: HttpOptions | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.forge = forge
        self.options = options or HttpOptions()
        self._auth, self._generation = auth, 0  # bumped each time the token is renewed
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={
                "User-Agent": self.options.user_agent,
                **headers,
                **(auth.headers() if auth else {}),
            },
            timeout=self.options.timeout_s,
            transport=transport if transport is not None else lean_transport(),
            # Renamed/transferred repos answer 301; httpx drops credentials on a
            # redirect to another origin.
            follow_redirects=True,
        )
        # Token-authenticated APIs need no cookies; keeping none spares parsing every
        # response's headers into a cookie jar (a good part of a 304's cost).
        self._client._cookies = _NoCookies()
        sender = self._client._transport
        self._lean = sender if isinstance(sender, LeanTransport) else None
        self._state = _State()
        self._mutation_lock = threading.Lock()
        self._state_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ForgeHttp(forge={self.forge!r}, base_url={str(self._client.base_url)!r})"

    def close(self) -> None:
        self._client.close()

    @property
    def not_before(self) -> float:
        """Epoch seconds before which the client refuses to call (rate limited)."""
        return self._state.not_before

    def get(
        self, path: str, params: Params | None = None, *, not_found: str = "missing_repo"
    ) -> Page:
        response = self._send("GET", path, params=params, not_found=not_found)
        return self._page(response, "GET")

    def get_optional(self, path: str, params: Params | None = None) -> Page | None:
        """GET where 404 is an answer ("no such collaborator"), not an error."""
        response = self._send("GET", path, params=params, not_found=None)
        return None if response.status_code == 404 else self._page(response, "GET")

    def query(self, url: str, body: object) -> Page:
        """A POST that only reads (GraphQL): no write lock, no spacing between calls."""
        response = self._send("POST", url, json=body, not_found="missing_repo")
        return self._page(response, "POST")

    def mutate(
        self, method: str, path: str, body: object = None, *, not_found: str = "missing_repo"
    ) -> Page:
        """One write, serialised with every other write and spaced apart."""
        with self._mutation_lock:
            self._refuse_if_limited(f"{self.forge} {method} {path}")  # before any pacing sleep
            self._space_mutation()
            try:
                response = self._send(method, path, json=body, not_found=not_found)
            finally:
                self._state.last_mutation = self.options.clock()
        return self._page(response, method)

    def collect(
        self,
        path: str,
        params: Params,
        next_request: NextRequest,
        *,
        conditional: bool = False,
        not_found: str = "missing_repo",
    ) -> list[Any] | None:
        """Every item over every page; ``None`` if ``conditional`` and nothing changed."""
        items: list[Any] = []
        changed = not conditional
        request: tuple[str, Params] | None = (path, params)
        for pages in range(self.options.max_pages + 1):
            if request is None:
                return items if changed else None
            if pages == self.options.max_pages:  # a page past the cap: ``max_pages`` are read
                break
            if conditional:
                page, fresh = self._get_conditional(request[0], request[1], not_found)
                changed = changed or fresh
            else:
                page = self.get(request[0], request[1], not_found=not_found)
            if not isinstance(page.data, list):
                raise self._bad(page.url, f"expected a JSON array, got {type(page.data).__name__}")
            items.extend(page.data)
            request = next_request(page, request[1])
        raise self._bad(path, f"more than {self.options.max_pages} pages; refusing to go on")

    # -- internals ---------------------------------------------------------

    def _get_conditional(self, path: str, params: Params, not_found: str) -> tuple[Page, bool]:
        key = (path, tuple(sorted(params.items())))
        cached = self._state.etags.get(key)
        url = self._state.urls.get(key)
        if url is None:  # parsed once; httpx parses a URL given as text on every request
            url = self._client.build_request("GET", path, params=params or None).url
            self._state.urls[key] = url
        headers = {"If-None-Match": cached.etag} if cached else None
        if cached is not None and self._lean is not None:
            response = self._revalidate(url, cached, not_found)
        else:
            response = self._send("GET", url, headers=headers, not_found=not_found)
        if response is None or (response.status_code == 304 and cached is not None):
            return cached.page, False  # type: ignore[union-attr]  # None only when cached
        page = self._page(response, "GET")
        etag = response.headers.get("etag")
        if etag:
            raw = self._client.build_request("GET", url).headers.raw
            self._state.etags[key] = _Cached(etag, page, tuple(raw))
        return page, True

    def _revalidate(self, url: httpx.URL, cached: _Cached, not_found: str) -> httpx.Response | None:
        """Ask again for a page held with its ETag, straight through the lean transport.

        The hot path of a poll cycle: the request is the one recorded with the page,
        plus ``If-None-Match``; a 304 (``None`` here) builds no ``httpx`` objects.
        Anything else becomes a response as ``_send`` gives; a redirect (a moved
        repo) is asked again through ``httpx``, which follows it.
        """
        assert self._lean is not None
        lean, etag = self._lean, cached.etag
        where = f"{self.forge} GET {url}"
        self._refuse_if_limited(where)
        headers = [*cached.request_headers, (b"If-None-Match", etag.encode())]
        generation = self._generation
        answer = self._sending(
            where, lambda: lean.exchange("GET", url, headers, None, self.options.timeout_s)
        )
        if answer.status == 304:
            return None
        if answer.status in _REDIRECTS or (answer.status == 401 and self._renewed(generation)):
            return self._send("GET", url, headers={"If-None-Match": etag}, not_found=not_found)
        response: httpx.Response = answer.response(self._client.build_request("GET", url))
        self._classify(response, where, not_found)
        return response

    def _space_mutation(self) -> None:
        last = self._state.last_mutation
        if last is None:
            return
        wait = last + self.options.mutation_spacing_s - self.options.clock()
        if wait > 0:
            self.options.sleep(wait)

    def _send(
        self,
        method: str,
        path: str | httpx.URL,
        *,
        params: Params | None = None,
        json: object = None,
        headers: Mapping[str, str] | None = None,
        not_found: str | None,
    ) -> httpx.Response:
        # ``params=None``, never ``{}``: httpx replaces a URL's query with empty params.
        build = partial(self._client.build_request, method, path, json=json, headers=headers)
        build = partial(build, params=params or None)
        request, generation = build(), self._generation
        where = f"{self.forge} {method} {request.url}"
        self._refuse_if_limited(where)
        response = self._sending(where, lambda: self._client.send(request))
        if response.status_code == 401 and self._renewed(generation):
            request = build()  # with the renewed token
            response = self._sending(where, lambda: self._client.send(request))
        self._classify(response, where, not_found)
        return response

    def _renewed(self, generation: int) -> bool:
        """After a 401 to a call sent with token ``generation``: is a newer one in use now?"""
        with self._state_lock:
            if generation != self._generation:
                return True
            fresh = self._auth.renewed() if self._auth is not None else None
            if fresh is None:
                return False
            self._auth, self._generation = fresh, generation + 1
            self._client.headers.update(fresh.headers())
            self._state.etags.clear()  # their recorded requests carry the old token
            return True

    def _sending(self, where: str, send: Callable[[], T]) -> T:
        """``send()``, with a transport failure turned into ``RetryableError("network")``."""
        try:
            return send()
        except httpx.TimeoutException:
            raise RetryableError(
                "network", f"{where}: no answer within {self.options.timeout_s:g}s"
            ) from None
        except httpx.HTTPError as exc:
            raise RetryableError("network", f"{where}: {type(exc).__name__}: {exc}") from None

    def _refuse_if_limited(self, where: str) -> None:
        wait = self._state.not_before - self.options.clock()
        if wait > 0:
            raise RetryableError(
                "forge_rate_limited",
                f"{where}: not sent, {self.forge} rate limit in force for {wait:.0f}s more",
                retry_after_s=wait,
            )

    def _classify(self, response: httpx.Response, where: str, not_found: str | None) -> None:
        status = response.status_code
        if status < 400:
            return
        if status == 429 or (status == 403 and looks_rate_limited(response)):
            wait = self._rate_wait(response.headers)
            with self._state_lock:
                self._state.not_before = max(self._state.not_before, self.options.clock() + wait)
            raise RetryableError(
                "forge_rate_limited",
                f"{where}: {status} rate limited; retry in {wait:.0f}s",
                retry_after_s=wait,
            )
        if status == 404 and not_found is None:
            return
        raise self._status_error(status, where, not_found, error_message(response))

    def _status_error(
        self, status: int, where: str, not_found: str | None, message: str
    ) -> RetryableError | FatalError:
        detail = f"{where}: {status} {message}".rstrip()
        if status >= 500 or status == 408:
            return RetryableError("forge_5xx", detail)
        if status == 401:
            return FatalError("forge_auth", f"{detail} (the token is missing, wrong or expired)")
        if status == 403:
            return FatalError("forge_forbidden", f"{detail} (the token lacks permission)")
        if status in (404, 410):  # GitHub answers a deleted issue 410 Gone
            return FatalError(
                not_found or "missing_repo", f"{detail} (not found, or the token cannot see it)"
            )
        return FatalError("forge_request", detail)

    def _rate_wait(self, headers: httpx.Headers) -> float:
        now = self.options.clock()
        retry_after = headers.get("retry-after")
        if retry_after:
            seconds = parse_retry_after(retry_after, now)
            if seconds is not None:
                return seconds
        for name in ("x-ratelimit-reset", "ratelimit-reset"):
            value = headers.get(name)
            if value and value.strip().isdigit():
                return max(0.0, float(value) - now)
        return self.options.default_rate_wait_s

    def _page(self, response: httpx.Response, method: str) -> Page:
        url = str(response.request.url)
        if response.status_code == 204 or not response.content:
            return Page(None, response.headers, url)
        try:
            data = response.json()
        except ValueError as exc:
            raise self._bad(
                f"{method} {url}",
                f"answered {response.status_code} with a body that is not valid JSON "
                f"({exc}; {len(response.content)} bytes)",
            ) from None
        return Page(data, response.headers, url)

    def _bad(self, where: str, problem: str) -> RetryableError:
        return RetryableError("forge_bad_response", f"{self.forge} {where}: {problem}")


class _NoCookies(httpx.Cookies):
    """A cookie jar that keeps nothing a response sets."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


def link_next(page: Page, params: Params) -> tuple[str, Params] | None:
    """Follow ``Link: <...>; rel="next"`` (GitHub, and Gitea/GitLab too)."""
    for part in page.headers.get("link", "").split(","):
        url, _, rel = part.partition(";")
        if 'rel="next"' in rel.replace(" ", ""):
            return url.strip().strip("<>"), {}
    return None
