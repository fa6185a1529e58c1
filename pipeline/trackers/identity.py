"""Who the forge token belongs to, so the daemon knows its own comments from look-alikes.

Every comment the daemon posts carries a hidden marker (``<!-- afk-pipeline:run=12:ended -->``,
``<!-- afk-progress run=12 -->``) that finds it again after a restart. The marker is plain
text: anyone who can comment can paste it. A marker therefore counts only on a comment
the token's own user wrote. That user is read once from the forge (``GET /user``) and
learnt from every comment the daemon posts (its author is the token's user, which also
covers a GitHub App, whose installation token cannot read ``/user``).

Where the user cannot be known yet (``/user`` refused and nothing posted since the
start), comments say ``own=None`` and a marker alone decides, as it always did.

``permission_trusted``: whether an actor's words count (GitHub and Gitea ask alike).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import replace
from urllib.parse import quote

from pipeline.config.settings import TrackerSettings
from pipeline.core.errors import FatalError
from pipeline.trackers.base import MARK_START, Comment, as_dict
from pipeline.trackers.base import field as data_field
from pipeline.trackers.http import ForgeHttp

log = logging.getLogger(__name__)


class TokenUser:
    """The login of the token's user: read from ``path``'s ``key`` once, or learnt from a post."""

    def __init__(self, http: ForgeHttp, path: str, key: str) -> None:
        self.http = http
        self.path = path
        self.key = key
        self._login: str | None = None
        self._refused = False  # the forge will not say (a GitHub App's installation token)
        self._lock = threading.Lock()

    def learn(self, user: object) -> None:
        """The user object (``/user``, or the author of a comment the daemon just posted)."""
        login = user.get(self.key) if isinstance(user, dict) else None
        if isinstance(login, str) and login:
            self._login = login

    def login(self) -> str | None:
        """The token user's login; ``None`` while the forge does not say. Transient errors raise."""
        with self._lock:
            if self._login is None and not self._refused:
                try:
                    page = self.http.get(self.path)
                except FatalError as exc:  # 401/403/404: asking again would not change it
                    self._refused = True
                    log.info("%s: who the token belongs to is not known (%s)", self.http.forge, exc)
                    return None
                self.learn(as_dict(page.data, page.url))
            return self._login

    def mark(self, comments: Iterable[Comment]) -> list[Comment]:
        """``comments`` with ``own`` set: written by the token's user or not (``None``: unknown).

        Only a marker makes ``own`` matter: without one among ``comments`` the forge is
        not asked who the token's user is.
        """
        comments = list(comments)
        if not any(MARK_START in c.body for c in comments):
            return comments
        login = self.login()
        if login is None:
            return comments
        me = login.casefold()  # GitHub logins ignore case
        return [replace(c, own=c.author.casefold() == me) for c in comments]


def permission_trusted(
    http: ForgeHttp,
    settings: TrackerSettings,
    repo_path: str,
    actor: str,
    allowed: frozenset[str],
) -> bool:
    """A configured trusted actor, or one whose collaborator permission is in ``allowed``.

    GitHub and Gitea answer ``GET <repo>/collaborators/<user>/permission`` alike;
    a 404 (not a collaborator) means not trusted.
    """
    if actor in settings.trusted_actors:
        return True
    if not settings.trust_write_permission:
        return False
    page = http.get_optional(f"{repo_path}/collaborators/{quote(actor, safe='')}/permission")
    if page is None:
        return False
    return data_field(as_dict(page.data, page.url), "permission", page.url, str) in allowed
