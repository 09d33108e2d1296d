"""Where a command is about to write: checked whole before the first file is written.

A command that writes several files one after another (a run's report, plots and queue; an export's
sheets) and meets a path that cannot take its file only at that file's turn leaves the others new and
this one old. Each target is checked first instead, and refused in one line naming it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from benchfill.errors import ConfigError


def check_targets(folder: Path, files: Iterable[Path], folders: Iterable[Path] = (), *, what: str,
                  hint: str) -> None:
    """Refuse a file of ``files`` that exists but is no regular file (a folder where a file goes), a folder of
    ``folders`` that exists but is no folder, and a ``folder`` whose nearest existing part is a file (mkdir
    makes the rest). ``what`` names the writer ("the run"), ``hint`` the way out ("give another --runs-dir")."""
    for d in (folder, *folder.parents):
        if d.exists() or d.is_symlink():
            if not d.is_dir():
                raise ConfigError(f"{d}: not a folder, yet {what} writes into {folder}; move it away, or {hint}")
            break
    for d in folders:
        if (d.exists() or d.is_symlink()) and not d.is_dir():
            raise ConfigError(f"{d}: not a folder, where {what} writes its files; move it away, or {hint}")
    for f in files:
        if f.exists() and not f.is_file():
            kind = "a folder" if f.is_dir() else "not a regular file"
            raise ConfigError(f"{f}: {kind}, where {what} writes a file; move it away, or {hint}")
