"""The daemon's git: one runner, the bare mirror per repo, credentials, the run's commits."""
