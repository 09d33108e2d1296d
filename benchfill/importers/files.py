"""Finding the log files an import reads: named directly, or found under the folders named."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from benchfill.errors import DataError


def find_files(paths: list[str | Path], is_log: Callable[[Path], bool]) -> list[Path]:
    """The files named directly (always: a wrong one is then reported), and those under the folders named
    for which ``is_log`` holds, in order; each file once. A file reached twice (named twice, or through a
    symlink) is one log: read twice, ``--sum`` would count its trials twice."""
    found: list[Path] = []
    seen: set[Path] = set()
    for p in map(Path, paths):
        if p.is_dir():
            files = sorted(q for q in _walk(p) if is_log(q))
        elif p.exists():
            files = [p]
        else:
            raise DataError(f"{p}: not found")
        for q in files:
            real = q.resolve()
            if real not in seen:
                seen.add(real)
                found.append(q)
    return found


def _walk(root: Path) -> list[Path]:
    """The files under ``root``, following symlinked folders (a logs folder often links each model's logs
    in; ``Path.rglob`` follows none before Python 3.13) and entering no folder twice, so that a link to a
    folder above cannot loop."""
    files: list[Path] = []
    entered: set[tuple[int, int]] = set()
    for top, dirs, names in os.walk(root, followlinks=True):
        st = os.stat(top)
        if (st.st_dev, st.st_ino) in entered:
            dirs[:] = []
            continue
        entered.add((st.st_dev, st.st_ino))
        dirs.sort()  # the same folder reached twice is entered by the same path every time
        files += [Path(top, n) for n in names if Path(top, n).is_file()]
    return files
