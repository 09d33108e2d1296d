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


def check_out_file(path: str | None, flag: str, inputs: dict[str, str | None] | None = None) -> None:
    """Refuse, before any work, an output path no file can be written to: a folder (or a name ending in a
    separator), a path under a file, a folder that takes no new file, or one of the command's own input files
    (``inputs``: {option: path}). Found only at the end, the work would be lost, the rename into place would
    name the command's own temp file, or the input would be gone."""
    if path is None:
        return
    import os
    from pathlib import Path

    from benchfill.errors import ConfigError

    out = Path(path)
    # The file is written beside its path and renamed into place: that would replace a link, or a device such
    # as /dev/null (run as root, a regular file then stood where the device was), not write through them.
    if out.is_symlink():
        raise ConfigError(f"{flag} {path!r}: is a link (to {os.readlink(out)}); give the file itself, which the "
                          "write replaces whole")
    if out.is_dir():
        raise ConfigError(f"{flag} {path!r}: is a folder; give a file")
    if out.exists() and not out.is_file():
        raise ConfigError(f"{flag} {path!r}: is not a regular file (a device, a pipe or a socket); give a file, "
                          "which the write replaces whole")
    # Path() drops a trailing separator, and the write would then make a file where a folder was meant
    if path.endswith(tuple(s for s in (os.sep, os.altsep) if s)):
        raise ConfigError(f"{flag} {path!r}: ends in a separator, naming a folder; give a file")
    _check_not_input(out, path, flag, inputs)
    _check_not_a_runs(out, path, flag)
    _check_writable(out.parent, path, flag)


def _check_not_a_runs(out, path: str, flag: str) -> None:
    """Refuse to replace a file a run wrote into its folder: ``benchfill fit`` run inside a run folder wrote
    its fit.json by default, over the run's own, and nothing said so."""
    if not any((out.parent / n).exists() for n in ("store.db", "store.url")):
        return
    from benchfill.errors import ConfigError
    from benchfill.run import OUTPUT_FILES

    if out.name in OUTPUT_FILES:
        raise ConfigError(f"{flag} {path!r}: is the {out.name} of the run in {out.parent.resolve()}, which it wrote; "
                          "give another path")


def check_out_dir(path: str | None, flag: str, names: tuple[str, ...],
                  inputs: dict[str, str | None] | None = None) -> None:
    """``check_out_file`` for an output folder that is to receive the files ``names``."""
    if path is None:
        return
    from pathlib import Path

    from benchfill.errors import ConfigError

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{flag} {out}: exists and is not a folder")
    for name in names:
        if (out / name).is_dir():
            raise ConfigError(f"{flag} {out}: {out / name} is a folder, where {name} is to be written")
        _check_not_input(out / name, path, flag, inputs, f"{out / name} ")
    _check_writable(out, path, flag)


def _check_not_input(out: Any, path: str, flag: str, inputs: dict[str, str | None] | None, what: str = "") -> None:
    import os
    from pathlib import Path

    from benchfill.errors import ConfigError

    for in_flag, in_path in (inputs or {}).items():
        if not in_path:
            continue
        # The same path counts even where no file is there yet: an input the command makes as it works (a
        # --scorer-cache written answer by answer) would be replaced by the output at the end, hours of work lost.
        try:
            same = Path(out).resolve(strict=False) == Path(in_path).resolve(strict=False)
        except (OSError, RuntimeError, ValueError):  # a loop of links: the file check below still runs
            same = False
        try:
            same = same or os.path.samefile(out, in_path)  # a hard link is one file under two names
        except (OSError, ValueError):  # either one missing: the paths alone decide
            pass
        if same:
            raise ConfigError(f"{flag} {path!r}: {what}is the {in_flag} file, which writing would overwrite; "
                              "give another path")


def _check_writable(folder: Any, path: str, flag: str) -> None:
    """The nearest existing folder at or above ``folder`` must take a new file. Tried for real, with a
    file made and removed: os.access says yes to root, and to a folder marked immutable."""
    import os
    import tempfile

    from benchfill.errors import ConfigError

    for parent in (folder, *folder.parents):  # the nearest one that exists decides
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{flag} {path!r}: {parent} is a file, not a folder")
            try:
                fd, probe = tempfile.mkstemp(prefix=".benchfill-probe-", dir=parent)
            except OSError as exc:
                raise ConfigError(f"{flag} {path!r}: cannot write in {parent} ({exc.strerror or exc})") from None
            os.close(fd)
            os.unlink(probe)
            return


def warn_untried(*matrices: Any) -> None:
    """One line on stderr per response file whose items with trials 0 only were left out (``read_responses``),
    and one where rows repeating a (model, item) pair were added up."""
    import sys

    from benchfill.data import repeated_note, untried_note

    for m in matrices:
        note = untried_note(m) if m is not None else None
        if note:
            print(f"benchfill: warning: {note}", file=sys.stderr)
        note = repeated_note(m) if m is not None else None
        if note:
            print(f"benchfill: note: {note}", file=sys.stderr)
