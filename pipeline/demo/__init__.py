"""``pipeline demo``: the whole loop on embedded defaults, with its local agent and sample
projects. May import ``pipeline.testing``.
"""
