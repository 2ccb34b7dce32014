"""`python -m modelhost` is the `modelhost` command."""

from __future__ import annotations

import sys

from modelhost.cli import main

sys.exit(main())
