"""`python -m modelhost.backends.python.stub ...`: a stub process (see __init__.py)."""

from __future__ import annotations

import sys

from modelhost.backends.python.stub import main

sys.exit(main(sys.argv[1:]))
