"""One run from claim to verdict: prepare, implement (agent + test gate), conflicts, publish,
watch, recovery; the issue's comments go through ``pipeline.intake.lifecycle``.
"""
