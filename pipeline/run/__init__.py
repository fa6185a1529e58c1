"""One run from claim to verdict: prepare, implement (agent + test gate), conflicts, publish,
watch, recovery, and the issue's lifecycle.
"""
