"""afk-pipeline: hand issues to coding agents and walk away."""

from __future__ import annotations

__version__ = "0.1.0"
