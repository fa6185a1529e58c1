"""HTTP: health, metrics, the JSON API and its OpenAPI description, live events, webhooks, the
dashboard.
"""
