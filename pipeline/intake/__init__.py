"""From tracker issues to queued runs: polling, webhooks, trusted authors and sanitised
issue text; the issue's labels and comments as its run moves (``lifecycle``), and the
word to an issue whose run waits in a frozen repo (``frozen``).
"""
