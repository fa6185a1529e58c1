"""The service's routes."""

import unittest

from service import RELEASE
from service.routes import handle


class RoutesTest(unittest.TestCase):
    def test_health_is_ok(self) -> None:
        status, body = handle("/health")
        self.assertEqual((status, body["status"]), (200, "ok"))

    def test_index_names_the_release(self) -> None:
        self.assertEqual(handle("/"), (200, {"service": "webapp", "release": RELEASE}))

    def test_unknown_path_is_404(self) -> None:
        status, _ = handle("/nope")
        self.assertEqual(status, 404)
