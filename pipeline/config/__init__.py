"""The configuration: the TOML file's pydantic models (``models``, ``values``), loading with
PIPELINE_* overrides (``load``, ``build``) into frozen settings (``settings``), ``config show``
(``render``) and what ``config check`` and ``pipeline run`` verify on the host (``door``).
"""
