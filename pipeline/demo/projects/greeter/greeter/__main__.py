"""``python -m greeter NAME``."""

import sys

from greeter.cli import main

sys.exit(main())
