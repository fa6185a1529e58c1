"""Scheduling: the claim loop, the worker pool, heartbeats, the sweeper and the periodic jobs."""
