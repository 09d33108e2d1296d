"""The package face: the public names import lazily from ``benchfill``, and the synchronous wrappers
work where an event loop already runs (a Jupyter cell)."""

from __future__ import annotations

import asyncio
import subprocess
import sys


def test_public_names_import_from_the_package_and_import_stays_light():
    code = (
        "import sys, benchfill\n"
        "light = not {'numpy', 'sqlmodel', 'sqlalchemy', 'openai', 'litellm'} & set(sys.modules)\n"
        "benchfill.run; benchfill.release\n"
        "from benchfill import run, release, ReviewBoard, Store, collect_responses\n"
        "import benchfill.run as run_module\n"
        "assert run is run_module is benchfill.run and callable(run) and callable(release)\n"
        "assert run.RunOptions is benchfill.RunOptions and callable(collect_responses)\n"
        "assert ReviewBoard.__name__ == 'ReviewBoard' and Store.__name__ == 'Store'\n"
        "print(light)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_type_checkers_see_every_public_name_as_what_it_is_at_run_time():
    """The lazy exports are spelled out under TYPE_CHECKING (they read as Any before: a misspelt keyword
    passed mypy and pyright); the two lists must name the same things from the same places."""
    import ast
    import importlib
    from pathlib import Path

    import benchfill

    tree = ast.parse(Path(benchfill.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    typed = {a.asname: (n.module, a.name) for n in block.body for a in n.names}
    assert all(alias == name for alias, (_, name) in typed.items())  # `import x as x`: a re-export
    assert set(typed) == set(benchfill._EXPORTS)
    assert benchfill.__all__ == sorted(benchfill._EXPORTS) + ["__version__"]
    for name, (module, attr) in typed.items():
        got = getattr(benchfill, name)
        want = getattr(importlib.import_module(module), attr)
        assert got is want, name
        if name in ("run", "release"):  # the module, which also calls its function at run time
            assert callable(got) and got.__name__ == f"benchfill.{name}" and callable(getattr(got, name))


def test_run_works_inside_a_running_event_loop_and_says_nothing_unasked(tmp_path, capfd):
    import benchfill

    opts = benchfill.RunOptions(benchmark="demo", backend="sim", runs_dir=str(tmp_path), run_id="r", gaps=1,
                                rounds=1, parents=2, children=2)

    async def cell():  # what a notebook cell does: a loop is already running
        return benchfill.run(opts)

    run_dir = asyncio.run(cell())
    assert (run_dir / "report.json").is_file() and (run_dir / "report.md").is_file()
    # a library call prints no progress unless asked (the CLI asks; --quiet does not)
    assert capfd.readouterr() == ("", "")


def test_collect_responses_works_inside_a_running_event_loop(tmp_path):
    from benchfill import Store, collect_responses
    from benchfill.benchmarks import get_benchmark
    from benchfill.config import ProbeConfig, RetryConfig
    from benchfill.probes import ProbePanel
    from benchfill.sim import SimServer, World

    bench = get_benchmark("demo")
    items = bench.items[:6]
    world = World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", n_probes=2)
    with SimServer(world) as srv:
        panel = ProbePanel([ProbeConfig(name=m, base_url=srv.base_url, model=m, trials=2) for m in world.probes],
                           RetryConfig(max_attempts=2, initial_wait_s=0, max_wait_s=0, jitter_s=0))

        async def cell():
            return collect_responses(Store(tmp_path / "s.db"), panel, items, bench.spec, seed=0)

        matrix = asyncio.run(cell())
    assert matrix.trials.shape == (2, 6) and (matrix.trials == 2).all()


def test_a_matrix_and_a_fit_print_as_a_summary_not_every_id(shared_data):
    # the dataclass repr printed every item id and count: about 99,000 characters for mmlu-pro in a notebook
    from benchfill.data import read_responses
    from benchfill.irt import fit

    m = read_responses(shared_data / "humaneval" / "responses.csv")
    assert repr(m) == f"ResponseMatrix(49 models x 164 items, {int(m.trials.sum())} trials, source={m.source!r})"
    f = fit(m)
    assert repr(f).startswith("IrtFit(1pl by map, 49 models x 164 items, b in [") and len(repr(f)) < 120
