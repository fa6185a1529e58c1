"""The demo web service."""

RELEASE = "1.4.0"
