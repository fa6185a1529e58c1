"""Shared primitives every layer uses: classified errors, the event sink, child processes, secret
masking, logging, fault checkpoints, removing read-only trees.
"""
