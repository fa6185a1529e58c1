"""Webhook deliveries: signature checks and a neutral "issue labelled" event.

Signatures, as each forge documents them:

- GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>``;
- Gitea/Forgejo: ``X-Gitea-Signature`` / ``X-Forgejo-Signature``: the bare hex
  HMAC-SHA256 of the raw body;
- GitLab: ``X-Gitlab-Token`` carries the secret itself.

GitHub delivers either content type a webhook is set to: ``application/json``
(the JSON is the body) or ``application/x-www-form-urlencoded`` (the JSON is the
form field ``payload``; the signature still covers the raw body as sent).

All comparisons are constant time (``hmac.compare_digest``). ``parse_event``
reads a verified body into a ``WebhookEvent`` or raises ``WebhookPayloadError``
naming what is malformed; events intake does not care about return ``None``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

FORM_TYPE = "application/x-www-form-urlencoded"
# GitLab sends a confidential issue's events under their own name (the hook's
# "Confidential issues events"), with the same payload as any issue's.
GITLAB_ISSUE_EVENTS = frozenset({"Issue Hook", "Confidential Issue Hook"})
# A delivery id is kept in a 200-character column (``webhook_deliveries.delivery_id``).
MAX_HEADER = 200


class WebhookPayloadError(ValueError):
    """A delivery whose headers or body are not what the forge documents."""


@dataclass(frozen=True)
class WebhookEvent:
    """One issue delivery, forge-neutral.

    ``action`` is ``labeled`` when labels were added (GitHub ``labeled``, Gitea
    ``label_updated``, GitLab an update whose ``changes.labels`` grew), else the
    forge's own action (``opened``, ``closed``, ...). ``labels_added`` is what
    the delivery says was added; Gitea does not say, so there it is every
    current label and callers confirm with the tracker's ``labeller``.
    """

    forge: str
    delivery_id: str
    action: str
    repo_slug: str
    issue_number: int
    sender: str
    labels: tuple[str, ...] = ()
    labels_added: tuple[str, ...] = ()
    is_pull_request: bool = False

    def added(self, label: str) -> bool:
        """True when this delivery reports ``label`` being applied."""
        return self.action == "labeled" and label in self.labels_added


def sign_github(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def sign_gitea(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_github(secret: bytes, body: bytes, signature_header: str | None) -> bool:
    """Check ``X-Hub-Signature-256``; a missing header or empty secret never verifies."""
    if not secret or not signature_header:
        return False
    # As bytes: the header is whatever the sender put there, and a str with a character
    # past ASCII makes compare_digest raise instead of answering False.
    return hmac.compare_digest(
        sign_github(secret, body).encode(), signature_header.strip().encode()
    )


def verify_gitea(secret: bytes, body: bytes, signature_header: str | None) -> bool:
    """Check ``X-Gitea-Signature`` or ``X-Forgejo-Signature`` (hex, no prefix)."""
    if not secret or not signature_header:
        return False
    given = signature_header.strip().lower().encode()
    return hmac.compare_digest(sign_gitea(secret, body).encode(), given)


def verify_gitlab(secret: bytes, token_header: str | None) -> bool:
    """Check ``X-Gitlab-Token`` against the configured secret."""
    if not secret or not token_header:
        return False
    return hmac.compare_digest(secret, token_header.encode("utf-8"))


def verify(kind: str, secret: bytes, headers: Mapping[str, str], body: bytes) -> bool:
    """Dispatch on tracker kind; ``headers`` must be case-insensitive (Starlette's are)."""
    if kind == "github":
        return verify_github(secret, body, headers.get("x-hub-signature-256"))
    if kind in ("gitea", "forgejo"):
        header = headers.get("x-forgejo-signature") or headers.get("x-gitea-signature")
        return verify_gitea(secret, body, header)
    if kind == "gitlab":
        return verify_gitlab(secret, headers.get("x-gitlab-token"))
    return False


def parse_event(kind: str, headers: Mapping[str, str], body: bytes) -> WebhookEvent | None:
    """An issue delivery as a ``WebhookEvent``; ``None`` for other events (ping, push)."""
    if kind == "github":
        return _parse_github(headers, body)
    if kind in ("gitea", "forgejo"):
        return _parse_gitea(kind, headers, body)
    if kind == "gitlab":
        return _parse_gitlab(headers, body)
    raise WebhookPayloadError(f"webhook for tracker kind {kind!r}: no webhook support")


def _parse_github(headers: Mapping[str, str], body: bytes) -> WebhookEvent | None:
    if headers.get("x-github-event") != "issues":
        return None
    payload = _load(_github_json(headers, body), "github")
    action = _get(payload, "action", str, "github")
    label = payload.get("label")
    added = (_get(payload, "label.name", str, "github"),) if action == "labeled" and label else ()
    return WebhookEvent(
        forge="github",
        delivery_id=_header(headers, "github", "x-github-delivery"),
        action=action,
        repo_slug=_get(payload, "repository.full_name", str, "github"),
        issue_number=_get(payload, "issue.number", int, "github"),
        sender=_get(payload, "sender.login", str, "github"),
        labels=_names(payload, "github", "name"),
        labels_added=added,
        is_pull_request="pull_request" in _get(payload, "issue", dict, "github"),
    )


def _github_json(headers: Mapping[str, str], body: bytes) -> bytes:
    """The JSON of a GitHub delivery: the body, or its ``payload`` field when form-encoded."""
    media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != FORM_TYPE:
        return body
    try:
        text = body.decode("ascii")
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=True, errors="strict")
    except ValueError as exc:  # not ASCII, not key=value pairs, or not UTF-8 once decoded
        raise WebhookPayloadError(f"github webhook: form body is malformed ({exc})") from None
    values = fields.get("payload", [])
    if len(values) != 1:
        found = "no" if not values else f"{len(values)}"
        raise WebhookPayloadError(
            f"github webhook: {FORM_TYPE} body has {found} 'payload' field(s), expected one"
        )
    return values[0].encode("utf-8")


def _parse_gitea(kind: str, headers: Mapping[str, str], body: bytes) -> WebhookEvent | None:
    event = headers.get("x-forgejo-event") or headers.get("x-gitea-event")
    if event not in ("issues", "issue_label"):
        return None
    payload = _load(body, kind)
    action = _get(payload, "action", str, kind)
    labels = _names(payload, kind, "name")
    labelled = action == "label_updated"
    return WebhookEvent(
        forge=kind,
        delivery_id=_header(headers, kind, "x-forgejo-delivery", "x-gitea-delivery"),
        action="labeled" if labelled else action,
        repo_slug=_get(payload, "repository.full_name", str, kind),
        issue_number=_get(payload, "number", int, kind),
        sender=_get(payload, "sender.login", str, kind),
        labels=labels,
        labels_added=labels if labelled else (),
        is_pull_request=payload["issue"].get("pull_request") is not None,
    )


def _parse_gitlab(headers: Mapping[str, str], body: bytes) -> WebhookEvent | None:
    if headers.get("x-gitlab-event") not in GITLAB_ISSUE_EVENTS:
        return None
    payload = _load(body, "gitlab")
    attributes = _get(payload, "object_attributes", dict, "gitlab")
    changes = payload.get("changes")
    label_change = changes.get("labels") if isinstance(changes, dict) else None
    if not isinstance(label_change, dict):
        label_change = {}
    before = _titles(label_change.get("previous"))
    after = _titles(label_change.get("current"))
    added = tuple(name for name in after if name not in before)
    return WebhookEvent(
        forge="gitlab",
        delivery_id=_header(headers, "gitlab", "idempotency-key", "x-gitlab-event-uuid"),
        action="labeled" if added else str(attributes.get("action") or "update"),
        repo_slug=_get(payload, "project.path_with_namespace", str, "gitlab"),
        issue_number=_get(payload, "object_attributes.iid", int, "gitlab"),
        sender=_get(payload, "user.username", str, "gitlab"),
        labels=_titles(payload.get("labels", [])),
        labels_added=added,
    )


def _load(body: bytes, forge: str) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser's depth
        raise WebhookPayloadError(f"{forge} webhook: body is not valid JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise WebhookPayloadError(f"{forge} webhook: body is not a JSON object")
    return payload


def _get(payload: Mapping[str, Any], path: str, kind: type, forge: str) -> Any:
    value: Any = payload
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            raise WebhookPayloadError(f"{forge} webhook: field {path!r} is missing")
        value = value[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WebhookPayloadError(f"{forge} webhook: field {path!r} is not a {kind.__name__}")
    return value


def _header(headers: Mapping[str, str], forge: str, *names: str) -> str:
    for name in names:
        value = headers.get(name)
        if value and len(value) > MAX_HEADER:  # unsigned, and the store keeps 200 of it
            raise WebhookPayloadError(
                f"{forge} webhook: header {name} is longer than {MAX_HEADER} characters"
            )
        if value:
            return value
    raise WebhookPayloadError(f"{forge} webhook: header {' or '.join(names)} is missing")


def _names(payload: Mapping[str, Any], forge: str, key: str) -> tuple[str, ...]:
    issue = _get(payload, "issue", dict, forge)
    labels = issue.get("labels") or []
    if not isinstance(labels, list):
        raise WebhookPayloadError(f"{forge} webhook: field 'issue.labels' is not a list")
    return tuple(str(item.get(key)) for item in labels if isinstance(item, dict))


def _titles(labels: object) -> tuple[str, ...]:
    if not isinstance(labels, list):
        return ()
    titles = (item.get("title") for item in labels if isinstance(item, dict))
    return tuple(str(title) for title in titles if title)
