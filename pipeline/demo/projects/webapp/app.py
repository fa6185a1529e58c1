"""Serve the routes over HTTP on 127.0.0.1:$PORT (the deploy starts it)."""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

from service.routes import handle


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        try:
            status, body = handle(self.path)
        except Exception as exc:  # a broken route answers 500, the server stays up
            status, body = 500, {"status": "error", "error": repr(exc)}
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    port = int(os.environ.get("PORT", "8000"))
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
