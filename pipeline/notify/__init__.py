"""Notifications to humans through apprise."""
