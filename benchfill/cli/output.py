"""JSON for ``--json`` and written reports: standard JSON, which has no NaN.

Python's json writes NaN and Infinity, which jq, JavaScript and most parsers refuse; an undefined
figure (a correlation over two tied items, an se that does not exist) is written as null instead.
"""

from __future__ import annotations

import json
import math
from typing import Any


def plain(obj: Any) -> Any:
    """``obj`` with numpy values made Python ones and non-finite floats made None."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):  # numpy arrays and scalars
        return plain(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(obj: Any, **kw: Any) -> str:
    """``json.dumps`` of ``plain(obj)``, refusing anything that is still not standard JSON."""
    return json.dumps(plain(obj), allow_nan=False, **kw)


def check_out_file(path: str | None, flag: str) -> None:
    """Refuse, before any work, an output path no file can be written to: an existing folder, or a path
    under a file. Found only at the end, the rename into place would name the command's own temp file."""
    if path is None:
        return
    from pathlib import Path

    from benchfill.errors import ConfigError

    out = Path(path)
    if out.is_dir():
        raise ConfigError(f"{flag} {path!r}: is a folder; give a file")
    for parent in out.parents:  # the nearest one that exists decides
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{flag} {path!r}: {parent} is a file, not a folder")
            return


def warn_untried(*matrices: Any) -> None:
    """One line on stderr per response file whose items with trials 0 only were left out (``read_responses``)."""
    import sys

    from benchfill.data import untried_note

    for m in matrices:
        note = untried_note(m) if m is not None else None
        if note:
            print(f"benchfill: warning: {note}", file=sys.stderr)
