"""Gitea and Forgejo over ``/api/v1`` (Forgejo keeps Gitea's API).

Quirks handled here, from Gitea's swagger description:

- lists page by ``page``/``limit`` and the server caps ``limit`` at its
  ``max_response_items`` (``GET /settings/api``, 50 by default); ``X-Total-Count``
  says how many there are in all;
- the issues endpoint returns pull requests too unless ``type=issues``, and a
  pull request carries a non-null ``pull_request``;
- issue labels are set by id, so names are resolved through the repo's labels
  (cached) and a missing label is created; an id the forge no longer knows (a label
  deleted and made again) is dropped from an add without a word and refused with 422
  on a remove, so either reads the repo's labels again once, then fails naming the
  label and the repo;
- the labeller is the ``user`` of the newest ``label`` timeline entry for that
  label whose ``body`` is ``"1"`` (Gitea writes ``"1"`` for added, ``""`` for removed);
- a commit's statuses carry their state under ``status``, the combined one under ``state``;
- no API says who edited an issue's body (the content history is a web page
  only), so ``edit_history`` is unattributed and the daemon's snapshot taken
  when it first saw the label is what guards the body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from pipeline.config.settings import TrackerSettings
from pipeline.core.errors import ConfigError, FatalError
from pipeline.trackers.base import (
    CiState,
    Comment,
    EditHistory,
    IssueDetail,
    LabelMark,
    TrackerIssue,
    as_dict,
    as_list,
    field,
    label_names,
    parse_time,
    split_slug,
    text,
)
from pipeline.trackers.http import ForgeHttp, HttpOptions, Page, Params
from pipeline.trackers.identity import TokenUser, permission_trusted
from pipeline.trackers.token import TokenHeader

DEFAULT_MAX_ITEMS = 50
WRITE_PERMISSIONS = frozenset({"owner", "admin", "write"})
NEW_LABEL_COLOR = "#ededed"


class GiteaTracker:
    """The ``Tracker`` for Gitea or Forgejo; ``base_url`` is the site or its ``/api/v1``."""

    def __init__(
        self,
        settings: TrackerSettings,
        token: str,
        *,
        options: HttpOptions | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not settings.base_url:
            raise ConfigError(f"trackers.{settings.name}.base_url: required for {settings.kind}")
        self.name = settings.name
        self.settings = settings
        base = settings.base_url.rstrip("/")
        self.http = ForgeHttp(
            settings.kind,
            base if base.endswith("/api/v1") else f"{base}/api/v1",
            {"Accept": "application/json"},
            auth=TokenHeader("Authorization", "token {}", token, settings.token),
            options=options,
            transport=transport,
        )
        self.me = TokenUser(self.http, "/user", "login")
        self._max_items: int | None = None
        self._label_ids: dict[str, dict[str, int]] = {}

    def __repr__(self) -> str:
        return f"GiteaTracker(name={self.name!r}, http={self.http!r})"

    def list_ready(self, slug: str) -> list[TrackerIssue] | None:
        params = {"state": "open", "type": "issues", "labels": self.settings.ready_label}
        items = self._collect(f"{_repo(slug)}/issues", params, conditional=True)
        if items is None:
            return None
        issues = [parse_issue(as_dict(item, f"gitea list {slug}")) for item in items]
        return sorted((i for i in issues if not i.is_pull_request), key=lambda i: i.number)

    def get_issue(self, slug: str, number: int) -> IssueDetail:
        issue = self.issue(slug, number)
        return IssueDetail(**vars(issue), comments=tuple(self.list_comments(slug, number)))

    def issue(self, slug: str, number: int) -> TrackerIssue:
        page = self.http.get(f"{_repo(slug)}/issues/{number}", not_found="missing_issue")
        return parse_issue(as_dict(page.data, page.url))

    def labeller(self, slug: str, number: int, label: str) -> str | None:
        mark = self.label_event(slug, number, label)
        return mark.actor if mark else None

    def label_event(self, slug: str, number: int, label: str) -> LabelMark | None:
        marks = self._label_marks(slug, number, label)
        return marks[-1] if marks else None

    def edit_history(self, slug: str, number: int, label: str) -> EditHistory:
        return EditHistory(labels=self._label_marks(slug, number, label), attributed=False)

    def _label_marks(self, slug: str, number: int, label: str) -> tuple[LabelMark, ...]:
        path = f"{_repo(slug)}/issues/{number}/timeline"
        marks = []
        for raw in self._collect(path, {}, not_found="missing_issue") or []:
            entry = as_dict(raw, path)
            if entry.get("type") != "label" or entry.get("body") != "1":
                continue
            if isinstance(entry.get("label"), dict) and entry["label"].get("name") == label:
                user = entry.get("user")
                actor = user.get("login") if isinstance(user, dict) else None
                marks.append(LabelMark(actor, text(entry, "created_at", path)))
        return tuple(sorted(marks, key=lambda mark: parse_time(mark.at)))

    def is_trusted(self, slug: str, actor: str) -> bool:
        return permission_trusted(self.http, self.settings, _repo(slug), actor, WRITE_PERMISSIONS)

    def add_labels(self, slug: str, number: int, labels: Sequence[str]) -> None:
        """Add by id; Gitea drops an id it does not know without a word (a label deleted
        and made again has a new id), so the answer is checked and the ids read again once."""
        if self._try_add(slug, number, labels, fresh=False):
            return
        if not self._try_add(slug, number, labels, fresh=True):
            raise FatalError(
                "forge_label",
                f"gitea {slug}#{number}: labels {', '.join(map(repr, labels))} were not applied "
                "although the repo's labels were read again; check the repo's labels",
            )

    def remove_label(self, slug: str, number: int, label: str) -> None:
        """Remove by id; an id the forge does not know (422) is read again once."""
        for fresh in (False, True):
            if fresh:
                self._label_ids.pop(slug, None)
            label_id = self._label_id(slug, label, create=False)
            if label_id is None:
                return  # no such label in the repo, so not on the issue either
            path = f"{_repo(slug)}/issues/{number}/labels/{label_id}"
            try:
                self.http.mutate("DELETE", path, not_found="missing_issue")
                return
            except FatalError as exc:
                if exc.kind != "forge_request":
                    raise
                if fresh:
                    raise _label_error(exc, slug, label) from None

    def comment(self, slug: str, number: int, body: str) -> str:
        path = f"{_repo(slug)}/issues/{number}/comments"
        page = self.http.mutate("POST", path, {"body": body}, not_found="missing_issue")
        posted = as_dict(page.data, path)
        self.me.learn(posted.get("user"))
        return str(field(posted, "id", path, int))

    def edit_comment(self, slug: str, number: int, comment_id: str, body: str) -> None:
        """``PATCH /repos/{owner}/{repo}/issues/comments/{id}``."""
        path = f"{_repo(slug)}/issues/comments/{int(comment_id)}"
        self.http.mutate("PATCH", path, {"body": body}, not_found="missing_comment")

    def list_comments(self, slug: str, number: int) -> list[Comment]:
        path = f"{_repo(slug)}/issues/{number}/comments"
        page = self.http.get(path, not_found="missing_issue")
        items = as_list(page.data, path)
        return self.me.mark(parse_comment(as_dict(item, path), path) for item in items)

    def close(self, slug: str, number: int, comment: str | None) -> None:
        if comment:
            self.comment(slug, number, comment)
        path = f"{_repo(slug)}/issues/{number}"
        self.http.mutate("PATCH", path, {"state": "closed"}, not_found="missing_issue")

    def commit_ci_state(self, slug: str, sha: str) -> CiState:
        path = f"{_repo(slug)}/commits/{sha}/status"
        page = self.http.get(path, not_found="missing_commit")
        statuses = field(as_dict(page.data, path), "statuses", path, (list, type(None))) or []
        return summarise_statuses(statuses, path)

    def open_pull_request(self, slug: str, head: str, base: str, title: str, body: str) -> str:
        """``POST /repos/{owner}/{repo}/pulls``, unless an open one for ``head`` exists."""
        path = f"{_repo(slug)}/pulls"
        for raw in self._collect(path, {"state": "open"}) or []:
            pull = as_dict(raw, path)
            if _branch(pull, "head") == head and _branch(pull, "base") == base:
                return text(pull, "html_url", path)
        payload = {"title": title, "head": head, "base": base, "body": body}
        page = self.http.mutate("POST", path, payload)
        return text(as_dict(page.data, page.url), "html_url", page.url)

    def close_client(self) -> None:
        self.http.close()

    # -- internals ---------------------------------------------------------

    def max_items(self) -> int:
        """The server's page-size cap, read once from ``/settings/api``."""
        if self._max_items is None:
            page = self.http.get_optional("/settings/api")
            value = as_dict(page.data, page.url).get("max_response_items") if page else None
            self._max_items = value if isinstance(value, int) and value > 0 else DEFAULT_MAX_ITEMS
        return self._max_items

    def _collect(
        self,
        path: str,
        params: Params,
        *,
        conditional: bool = False,
        not_found: str = "missing_repo",
    ) -> list[Any] | None:
        first = {**params, "page": "1", "limit": str(self.max_items())}
        return self.http.collect(
            path, first, _next_page, conditional=conditional, not_found=not_found
        )

    def _try_add(self, slug: str, number: int, labels: Sequence[str], *, fresh: bool) -> bool:
        """POST the labels' ids (read afresh with ``fresh``); True when the issue now has them."""
        if fresh:
            self._label_ids.pop(slug, None)
        ids = [self._label_id(slug, name, create=True) for name in labels]
        path = f"{_repo(slug)}/issues/{number}/labels"
        try:
            page = self.http.mutate("POST", path, {"labels": ids}, not_found="missing_issue")
        except FatalError as exc:
            if exc.kind != "forge_request" or fresh:  # a forge that refuses an unknown id
                raise
            return False
        if not isinstance(page.data, list):
            return True  # nothing to check against
        applied = {as_dict(lab, path).get("name") for lab in page.data}
        return all(name in applied for name in labels)

    def _label_id(self, slug: str, name: str, *, create: bool) -> int | None:
        """The repo label's id from the cache; a name the cache lacks is read again (the
        label may have been made since), and created if still missing and ``create``."""
        ids = self._label_ids.get(slug)
        if ids is None or name not in ids:
            ids = self._load_labels(slug)
        if name not in ids and create:
            page = self.http.mutate(
                "POST", f"{_repo(slug)}/labels", {"name": name, "color": NEW_LABEL_COLOR}
            )
            ids[name] = field(as_dict(page.data, page.url), "id", page.url, int)
        return ids.get(name)

    def _load_labels(self, slug: str) -> dict[str, int]:
        path = f"{_repo(slug)}/labels"
        labels = self._collect(path, {}) or []
        ids = {
            field(as_dict(lab, path), "name", path, str): field(lab, "id", path, int)
            for lab in labels
        }
        self._label_ids[slug] = ids
        return ids


def _repo(slug: str) -> str:
    owner, name = split_slug(slug)
    if "/" in owner:
        raise ConfigError(f"repo slug {slug!r}: Gitea slugs are owner/name")
    return f"/repos/{owner}/{name}"


def _label_error(exc: FatalError, slug: str, label: str) -> FatalError:
    return FatalError(
        "forge_label",
        f"gitea {slug}: label {label!r} could not be removed although the repo's labels "
        f"were read again ({exc})",
    )


def _branch(pull: dict[str, Any], side: str) -> str | None:
    ref = pull.get(side)
    return ref.get("ref") if isinstance(ref, dict) else None


def _next_page(page: Page, params: Params) -> tuple[str, Params] | None:
    """Next ``page`` until ``X-Total-Count`` is reached or a short page ends the list.

    A first page shorter than asked while the total says there is more means the
    server capped ``limit`` lower than we thought; later pages use that size.
    """
    number, limit = int(params["page"]), int(params["limit"])
    count = len(page.data) if isinstance(page.data, list) else 0
    total_header = page.headers.get("x-total-count", "")
    if count == 0:
        return None
    if not total_header.isdigit():
        done = count < limit
    else:
        total = int(total_header)
        if number == 1 and count < min(limit, total):
            limit = count
        done = number * limit >= total
    if done:
        return None
    following = {**params, "page": str(number + 1), "limit": str(limit)}
    return page.url.split("?", 1)[0], following


def parse_issue(item: dict[str, Any]) -> TrackerIssue:
    where = f"gitea issue {item.get('url', '?')}"
    return TrackerIssue(
        number=field(item, "number", where, int),
        title=text(item, "title", where),
        body=text(item, "body", where),
        author=field(item, "user.login", where, str),
        url=text(item, "html_url", where),
        labels=label_names(item, where),
        state=field(item, "state", where, str),
        updated_at=text(item, "updated_at", where),
        external_id=str(field(item, "id", where, int)),
        is_pull_request=item.get("pull_request") is not None,
    )


def parse_comment(item: dict[str, Any], where: str) -> Comment:
    return Comment(
        author=field(item, "user.login", where, str),
        body=text(item, "body", where),
        created_at=text(item, "created_at", where),
        id=str(field(item, "id", where, int)),
    )


def summarise_statuses(statuses: list[Any], where: str) -> CiState:
    """Gitea's per-context statuses: failure/error beat pending beat success/warning."""
    if not statuses:
        return CiState("none")
    details, failed, pending = [], [], False
    for item in (as_dict(s, where) for s in statuses):
        state = item.get("status")
        details.append(f"status {item.get('context')}: {state}")
        if state in ("failure", "error"):
            failed.append(str(item.get("target_url") or ""))
        elif state == "pending":
            pending = True
    if failed:
        return CiState("failure", tuple(details), next((url for url in failed if url), ""))
    return CiState("pending" if pending else "success", tuple(details))
