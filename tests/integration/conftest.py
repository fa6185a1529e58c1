"""Fixtures the intake tests share: each fake forge, served, and the intake over it.

``fake`` is every forge kind in turn (GitHub, Gitea, GitLab) holding one repo,
``forge_slug``, with ``forge_writer`` allowed to write to it; ``world`` enrols that
repo and wires the intake over real tracker clients and a real store on both
engines. A module with its own repo, maintainer, repos not enrolled or intake knobs
overrides the small fixture (``def forge_writer() -> str: return "maint"``); a module
with its own forge setup overrides ``fake`` or ``world`` as a whole.
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


@pytest.fixture
def forge_others() -> tuple[str, ...]:
    """More repos on the fake forge, with no writer, that ``world`` does not enrol."""
    return ()


@pytest.fixture
def world_knobs() -> WorldKnobs:
    """The knobs ``world`` builds its intake with (``IntakeWorld.build``'s defaults)."""
    return {}


@pytest.fixture(params=list(FORGES))
def fake(
    request: pytest.FixtureRequest,
    forge_slug: str,
    forge_writer: str,
    forge_others: tuple[str, ...],
) -> Iterator[FakeForge]:
    """Each fake forge, served, holding ``forge_slug`` with ``forge_writer`` as a writer,
    and ``forge_others``."""
    with served(request.param, forge_slug, writer=forge_writer) as forge:
        for slug in forge_others:
            forge.add_repo(slug)
        yield forge


@pytest.fixture
def world(
    fake: FakeForge, forge_slug: str, world_knobs: WorldKnobs, database_url: str, tmp_path: Path
) -> Iterator[IntakeWorld]:
    """The intake over ``fake`` with ``forge_slug`` enrolled, a store on each engine."""
    with intake_over(fake, forge_slug, database_url, tmp_path / "volume", **world_knobs) as built:
        yield built
