"""Workspaces on the volume: persistent checkouts, warm worktree slots, caches, git-crypt clones,
frozen evidence, housekeeping.
"""
