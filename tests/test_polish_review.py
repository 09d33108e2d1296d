"""Review and release input checks: a version's bounds, blank edits, a reason's control characters, a closed board."""

from __future__ import annotations

import pytest
from test_review_support import make_run

from benchfill.cli import main
from benchfill.errors import ConfigError
from benchfill.release import release


def test_a_huge_version_is_refused_so_later_ones_are_not_blocked(tmp_path, shared_data, capsys):
    run = make_run(tmp_path, shared_data)
    with pytest.raises(ConfigError, match=r"^version '999999999.0.0': its major \(X\) number is over 9999"):
        release(run, "999999999.0.0")
    with pytest.raises(ConfigError, match=r"its patch \(Z\) number is over 9999"):
        release(run, "1.0." + "9" * 5000)  # past Python's own limit on int() of a string: said, not a ValueError
    with pytest.raises(ConfigError, match=r"characters, over 64$"):
        release(run, "1.0.0-" + "a" * 80)
    assert main(["release", str(run), "--version", "1.99999.0"]) == 2
    err = capsys.readouterr().err
    assert "minor (Y) number is over 9999" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "releases" / "aime24").exists() or not any((tmp_path / "releases" / "aime24").iterdir())
    assert release(run, "2025.6.30").version == "2025.6.30"  # a date fits
    assert release(run, "2025.7.1").version == "2025.7.1"
