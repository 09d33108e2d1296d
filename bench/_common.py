"""What the benchmark scripts share: where ../shared/data is."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shared_data() -> Path:
    """../shared/data beside the checkout, or $BENCHFILL_SHARED_DATA."""
    for cand in (os.environ.get("BENCHFILL_SHARED_DATA"), ROOT.parent / "shared" / "data", ROOT / "shared" / "data"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    sys.exit("../shared/data not found; set BENCHFILL_SHARED_DATA")
