"""The ``pipeline`` command line: run the daemon, review history, operate repos."""
