"""The daemon's listeners: the main one, and the optional webhook-only one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.config.settings import Settings
from pipeline.http.app import AppOptions, ServerHandle, create_app, create_webhook_app, serve
from pipeline.http.common import WebhookHandler
from pipeline.http.metrics import Metrics
from pipeline.store import Store


@dataclass
class Listeners:
    main: ServerHandle
    webhooks: ServerHandle | None
    metrics: Metrics

    @property
    def url(self) -> str:
        return self.main.url

    def stop(self) -> None:
        if self.webhooks is not None:
            self.webhooks.stop()
        self.main.stop()


def start_listeners(
    store: Store,
    settings: Settings,
    webhook_handler: WebhookHandler,
    health_extra: Callable[[], Mapping[str, Any]],
) -> Listeners:
    """Serve the app on ``[http] listen`` and, if set, webhooks on ``webhook_listen``."""
    options = AppOptions(webhook_handler=webhook_handler, health_extra=health_extra)
    app = create_app(store, settings, options)
    metrics: Metrics = app.state.metrics
    main = serve(app, settings.http.listen_host, settings.http.listen_port)
    hooks = None
    if settings.http.webhook_listen is not None:
        host, port = settings.http.webhook_listen
        hook_app = create_webhook_app(store, settings, webhook_handler, metrics)
        try:
            hooks = serve(hook_app, host, port)
        except BaseException:
            main.stop()
            raise
    return Listeners(main, hooks, metrics)
