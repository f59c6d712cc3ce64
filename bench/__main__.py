"""``python -m bench``: every benchmark of issue 6 in one invocation (see bench/run_all.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_all import main

sys.exit(main())
