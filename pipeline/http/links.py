"""Where every link the daemon writes points (issue comments, notifications).

``[http] public_url`` when set, else the listen address when it names a
reachable host. A wildcard listen address (``0.0.0.0``, ``::``) is never
written into a link: with no ``public_url`` a comment names the
``pipeline runs show`` command instead. Imports nothing heavy: the daemon
uses it even when it serves no HTTP.
"""

from __future__ import annotations

from pipeline.config.settings import HttpSettings

WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def listen_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def link_base(http: HttpSettings, bound_port: int | None = None) -> str | None:
    """The base URL of the daemon's links, or None when there is no honest one."""
    if http.public_url:
        return http.public_url.rstrip("/")
    if http.listen_host in WILDCARDS:
        return None
    return listen_url(http.listen_host, bound_port or http.listen_port)
