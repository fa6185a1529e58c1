"""The configuration: frozen settings that are also the TOML file's schema (``settings``,
``presets``, ``secrets``, ``values``), loading with PIPELINE_* overrides (``load``,
``build``), ``config show`` (``render``) and what ``config check`` and ``pipeline run``
verify on the host (``door``).
"""
