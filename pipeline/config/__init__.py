"""The configuration: TOML files and PIPELINE_* overrides loaded, validated and rendered into
frozen settings.
"""
