"""The README's demo run prints what the README shows.

Any change that moves a draw of the simulated world (a prompt's wording: the world hashes the prompt)
moves the demo's figures; the README had gone on showing the figures of two changes before.

A seed gives the same run on the eight OpenBLAS kernels tried, to the last digit
(``tests/test_same_run_on_any_machine.py`` pins two of them). Before ties between children answered alike
went to the id, the same run spent 5,568 to 8,168 annotation and confirmation rollouts on them, and a CI
machine printed other counts than the README's. A machine not tried may still round its fits otherwise
(numpy's own loops and the C library's differ by CPU), and what that moves first is how many rollouts the
annotation spends: the rollout counts and the intervals' ends are checked within a margin of the README's,
every other character exactly.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the numbers that move with the machine: the interval's ends, and the rollout counts of the spend line
INTERVAL = re.compile(r"(?<=interval )\d+\.\d+|(?<= to )\d+\.\d+(?=\))")
ROLLOUTS = re.compile(r"\d+(?= annotation and confirmation rollouts)|\d+(?= spot-check rollouts)")
INTERVAL_MARGIN = 0.03  # z, either end
ROLLOUT_MARGIN = 0.4  # of the README's count


def _split(line: str) -> tuple[str, list[float], list[int]]:
    """The line with its moving numbers taken out, and those numbers."""
    ends = [float(x) for x in INTERVAL.findall(line)]
    counts = [int(x) for x in ROLLOUTS.findall(line)]
    return ROLLOUTS.sub("#", INTERVAL.sub("#", line)), ends, counts


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
    printed = [line for line in printed if not line.lstrip().startswith("report")][:len(shown)]
    assert len(printed) == len(shown), printed
    for want, got in zip(shown, printed, strict=True):
        want_text, want_ends, want_counts = _split(want)
        got_text, got_ends, got_counts = _split(got)
        assert got_text == want_text, (got, want)
        assert all(abs(g - w) <= INTERVAL_MARGIN for w, g in zip(want_ends, got_ends, strict=True)), (got, want)
        assert all(abs(g - w) <= ROLLOUT_MARGIN * w for w, g in zip(want_counts, got_counts, strict=True)), (got, want)
