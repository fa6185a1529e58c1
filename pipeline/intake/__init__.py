"""From tracker issues to queued runs: polling, webhooks, trusted authors and sanitised
issue text.
"""
