"""Allow ``python -m pipeline``."""

from __future__ import annotations

from pipeline.cli.main import main

raise SystemExit(main())
