"""Fixtures the intake tests share: each fake forge, served, and the intake over it.

``fake`` is every forge kind in turn (GitHub, Gitea, GitLab) holding one repo,
``forge_slug``, with ``forge_writer`` allowed to write to it; ``world`` enrols that
repo and wires the intake over real tracker clients and a real store on both
engines. A module with its own repo or maintainer overrides the small fixture
(``def forge_writer() -> str: return "maint"``); a module with its own forge setup
overrides ``fake`` or ``world`` as a whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Unpack

import pytest

from pipeline.testing.forges import FORGES, served
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.intake_world import IntakeWorld, WorldKnobs

SLUG = "acme/widgets"
READY = "ready-for-agent"


@contextmanager
def intake_over(
    fake: FakeForge, slug: str, database_url: str, volume: Path, **knobs: Unpack[WorldKnobs]
) -> Iterator[IntakeWorld]:
    """The intake over ``fake`` with ``slug`` enrolled, on ``database_url``; closed after."""
    world = IntakeWorld.build(
        database_url, volume, {fake.forge: fake}, [(fake.forge, slug)], **knobs
    )
    try:
        yield world
    finally:
        world.close()


@pytest.fixture
def forge_slug() -> str:
    """The repo on the fake forge that ``world`` enrols."""
    return SLUG


@pytest.fixture
def forge_writer() -> str:
    """The user the fake forge lets write to ``forge_slug``."""
    return "alice"


@pytest.fixture(params=list(FORGES))
def fake(request: pytest.FixtureRequest, forge_slug: str, forge_writer: str) -> Iterator[FakeForge]:
    """Each fake forge, served, holding ``forge_slug`` with ``forge_writer`` as a writer."""
    with served(request.param, forge_slug, writer=forge_writer) as forge:
        yield forge


@pytest.fixture
def world(
    fake: FakeForge, forge_slug: str, database_url: str, tmp_path: Path
) -> Iterator[IntakeWorld]:
    """The intake over ``fake`` with ``forge_slug`` enrolled, a store on each engine."""
    with intake_over(fake, forge_slug, database_url, tmp_path / "volume") as built:
        yield built
