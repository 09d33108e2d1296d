"""The README's demo run prints what the README shows.

Any change that moves a draw of the simulated world (a prompt's wording: the world hashes the prompt)
moves the demo's figures; the README had gone on showing the figures of two changes before.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_demo_headline_is_what_the_demo_run_prints(tmp_path, capsys):
    from benchfill.cli import main

    text = (ROOT / "README.md").read_text()
    block = re.search(r"```text\n(demo-benchfill-\w+ \(SIMULATED\): after-figures by confirmed z\n.*?)```", text,
                      re.DOTALL)
    assert block, "the README's demo headline block is gone"
    shown = [line for line in block.group(1).splitlines() if not line.lstrip().startswith(("report", "runs/"))]
    assert main(["run", "--benchmark", "demo", "--gaps", "3", "--runs-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    printed = err[err.index(shown[0].split()[0]):].splitlines()
    assert [line for line in printed if not line.lstrip().startswith("report")][:len(shown)] == shown
