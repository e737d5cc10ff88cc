"""Where things are, for tests at any depth under tests/: the repository root and this folder."""
from __future__ import annotations

import os

HELPERS = os.path.dirname(os.path.abspath(__file__))  # tests/helpers: the shared test modules
ROOT = os.path.dirname(os.path.dirname(HELPERS))      # the repository root
