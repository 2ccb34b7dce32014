"""`python -m modelhost` is the `modelhost` command."""

from __future__ import annotations

import sys

from modelhost.cli.main import main

sys.exit(main())
