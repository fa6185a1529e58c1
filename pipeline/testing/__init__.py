"""Test doubles and harnesses: fake forges, a deploy target, dummy daemons, git remotes, ports,
clocks, databases and config writers. Imported by tests, benchmarks and the demo only.
"""
