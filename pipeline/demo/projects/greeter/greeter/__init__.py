"""A tiny greeting library with a command line."""

from greeter.core import greet

__all__ = ["greet"]
