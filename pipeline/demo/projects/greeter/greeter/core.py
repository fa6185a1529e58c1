"""Greetings: the library behind the ``greeter`` command."""

from __future__ import annotations


def greet(name: str) -> str:
    """A friendly greeting for ``name``; a blank name greets the world."""
    name = name.strip() or "world"
    return f"Hello, {name}!"
