"""Polish on traffic: a key sent in clear text is warned of, detect's permutations are bounded and show
progress, a moved run folder resumes from its call cache."""

from __future__ import annotations

import asyncio
import logging

import pytest

from benchfill import config as config_mod
from benchfill.config import LLMConfig, ProbeConfig, RetryConfig

SECRET = "sk-polish-0123456789abcdefghijklmnop"


@pytest.fixture
def clear_warned(monkeypatch):
    monkeypatch.setattr(config_mod, "_CLEAR_WARNED", set(), raising=False)
    monkeypatch.setenv("POLISH_KEY", SECRET)


def _clear_text_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "plain http" in r.getMessage()]


def _open_probes(*urls: str) -> None:
    from benchfill.probe_http import ProbeHttp
    from benchfill.probes import ProbePanel

    panel = ProbePanel([ProbeConfig(name=f"p{i}", base_url=u, model=f"m{i}", api_key_env="POLISH_KEY")
                        for i, u in enumerate(urls)])

    async def go() -> None:
        http = ProbeHttp(panel)
        http.open()
        await http.close()

    asyncio.run(go())


def test_a_key_sent_over_plain_http_beyond_loopback_is_warned_of_once_per_endpoint(clear_warned, caplog):
    caplog.set_level(logging.WARNING, logger="benchfill")
    _open_probes("http://10.1.2.3:8000/v1", "http://10.1.2.3:8000/v1/", "https://10.1.2.3:8443/v1",
                 "http://127.0.0.1:8000/v1", "http://localhost:8001/v1", "http://[::1]:8002/v1")
    _open_probes("http://10.1.2.3:8000/v1")  # a second panel in the same process: no second line
    said = _clear_text_warnings(caplog)
    assert len(said) == 1, said
    assert "POLISH_KEY" in said[0] and "http://10.1.2.3:8000/v1" in said[0]
    assert SECRET not in caplog.text


@pytest.mark.parametrize("url", ["http://localhost.:8000/v1", "http://[::ffff:127.0.0.1]/v1", "http://127.1/v1",
                                 "http://0.0.0.0:8000/v1", "http://ip6-localhost/v1", "HTTP://127.0.0.1/v1",
                                 "http://app.localhost:9/v1"])
def test_a_loopback_address_however_written_is_not_warned_of(clear_warned, caplog, url):
    caplog.set_level(logging.WARNING, logger="benchfill")
    assert config_mod.key_from_env("POLISH_KEY", sent_to=url) == SECRET
    assert _clear_text_warnings(caplog) == []


@pytest.mark.parametrize("url", ["http://127.0.0.1.nip.io:8000/v1", "http://localhost.evil.com/v1",
                                 "http://[fe80::1]/v1", "http://[::ffff:10.0.0.1]/v1"])
def test_a_name_that_only_looks_local_is_warned_of(clear_warned, caplog, url):
    caplog.set_level(logging.WARNING, logger="benchfill")
    config_mod.key_from_env("POLISH_KEY", sent_to=url)
    assert len(_clear_text_warnings(caplog)) == 1
    # inet_aton stops at a space: a host of "127.0.0.1 evil.com" is no loopback address
    from benchfill.netguard import on_this_machine

    assert not on_this_machine("127.0.0.1 evil.com")
    assert on_this_machine("0x7f000001") and on_this_machine("2130706433")


def test_one_endpoint_written_two_ways_is_warned_of_once(clear_warned, caplog):
    caplog.set_level(logging.WARNING, logger="benchfill")
    for url in ("http://10.1.2.3:8000/v1", "http://10.1.2.3:8000/v1/", "HTTP://10.1.2.3:8000/v1",
                "http://[fd00::5]:8000/v1"):
        config_mod.key_from_env("POLISH_KEY", sent_to=url)
    said = _clear_text_warnings(caplog)
    assert len(said) == 2 and "fd00::5" in said[1], said
    assert SECRET not in caplog.text


def test_no_key_no_warning(clear_warned, caplog, monkeypatch):
    monkeypatch.delenv("POLISH_KEY")
    caplog.set_level(logging.WARNING, logger="benchfill")
    _open_probes("http://10.1.2.3:8000/v1")
    assert _clear_text_warnings(caplog) == []


def test_the_rewriter_key_sent_over_plain_http_is_warned_of_too(clear_warned, caplog):
    from benchfill import llm
    from benchfill.errors import EndpointError

    caplog.set_level(logging.WARNING, logger="benchfill")
    cfg = LLMConfig(model="openai/m", api_base="http://10.1.2.4:9/v1", api_key_env="POLISH_KEY", timeout_s=5)
    retry = RetryConfig(max_attempts=1, initial_wait_s=0, max_wait_s=0, jitter_s=0)
    with pytest.raises(EndpointError):  # the test guard refuses the connection: the warning came before it
        asyncio.run(llm._complete("rewriter", cfg, [{"role": "user", "content": "hi"}], 0, None, retry,
                                  llm.LLMStats()))
    said = _clear_text_warnings(caplog)
    assert len(said) == 1 and "POLISH_KEY" in said[0] and "10.1.2.4" in said[0], said
    assert SECRET not in caplog.text


def test_the_endpoint_check_warns_before_it_sends_the_key(clear_warned, caplog, tmp_path):
    from benchfill.config import load_config
    from benchfill.serving import check_endpoints

    caplog.set_level(logging.WARNING, logger="benchfill")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[probes]]\nname = "q"\nbase_url = "http://10.1.2.5:8000/v1"\nmodel = "m"\n'
                   'api_key_env = "POLISH_KEY"\n')
    check_endpoints(load_config(cfg), timeout_s=1)
    said = _clear_text_warnings(caplog)
    assert len(said) == 1 and "10.1.2.5" in said[0], said
    assert SECRET not in caplog.text


def _constant_responses(tmp_path):
    # every item all right on both sides: nothing can move, so the old code answered at once, unbounded
    b, a = tmp_path / "before.csv", tmp_path / "after.csv"
    b.write_text("model,item_id,correct,trials\n" + "".join(f"m,q{i},8,8\n" for i in range(6)))
    a.write_text("model,item_id,correct,trials\n" + "".join(f"m,q{i},8,8\n" for i in range(6)))
    return b, a


def test_detect_refuses_permutations_past_its_bound_in_one_line(tmp_path, capsys):
    from benchfill.cli import main
    from benchfill.errors import DataError
    from benchfill.measure import detect as detect_mod

    b, a = _constant_responses(tmp_path)
    too_many = "10000001"
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations", too_many]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and "--permutations" in err[0] and "10,000,000" in err[0], err
    assert cap.out == ""
    with pytest.raises(DataError, match="at most 10,000,000"):
        detect_mod.stratified_permutation_test([1, 2], [4, 4], [3, 3], [4, 4], permutations=int(too_many))
    assert main(["detect", "--before", str(b), "--after", str(a), "--permutations",
                 "10000000"]) == 0  # the bound itself is allowed


def test_a_long_permutation_test_says_how_far_it_is_on_stderr(tmp_path, capsys, monkeypatch):
    from benchfill.cli import main
    from benchfill.measure import detect as detect_mod

    b, a = tmp_path / "before.csv", tmp_path / "after.csv"
    b.write_text("model,item_id,correct,trials\n" + "".join(f"m,q{i},{i % 4},8\n" for i in range(12)))
    a.write_text("model,item_id,correct,trials\n" + "".join(f"m2,q{i},{min(8, i % 4 + 3)},8\n" for i in range(12)))
    args = ["detect", "--before", str(b), "--after", str(a), "--permutations", "4000", "--json"]
    assert main(args) == 0
    quiet = capsys.readouterr()
    assert "permutations" not in quiet.err  # a short test says nothing
    monkeypatch.setattr(detect_mod, "PROGRESS_EVERY_S", 0.0)
    monkeypatch.setattr(detect_mod, "_CHUNK_CELLS", 12_000)  # 1,000 permutations a chunk here
    assert main(args) == 0
    told = capsys.readouterr()
    lines = [ln for ln in told.err.splitlines() if ln.startswith("permutations ")]
    assert lines == ["permutations 1,000/4,000 done", "permutations 2,000/4,000 done",
                     "permutations 3,000/4,000 done"], told.err
    assert told.out == quiet.out  # the same p-value: progress only reads


def _sent(run_dir) -> tuple[dict, dict]:
    import json

    report = json.loads((run_dir / "report.json").read_text())
    return report, report["backend"]["traffic"]["this_process"]


def _calls(run_dir) -> int:
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(run_dir / "store.db")) as db:
        return db.execute("select count(*) from modelcall").fetchone()[0]


def test_a_moved_simulated_run_resumes_from_its_call_cache(tmp_path):
    import shutil

    from benchfill.run import RunOptions, run

    opts = dict(benchmark="demo", backend="sim", gaps=1, rounds=1, parents=2, children=2, progress=False, seed=5)
    first = run(RunOptions(runs_dir=str(tmp_path / "runs"), **opts))
    made, _ = _sent(first)
    calls = _calls(first)
    moved = tmp_path / "elsewhere" / first.name
    shutil.move(first, moved)
    again = run(RunOptions(runs_dir=str(tmp_path / "elsewhere"), **opts))
    assert again == moved  # the same run (its id holds no path), resumed where it now is
    report, traffic = _sent(again)
    assert traffic["requests"] == 0 and traffic["cache_hits"] > 0, traffic  # no probe call sent again
    assert _calls(moved) == calls  # nor a rewriter's or judge's: no new call in the cache
    for key in ("run_id", "spend", "gaps", "max_gap_after", "top_k_sum_after", "true_target_deviation (simulated)"):
        assert report[key] == made[key], key  # the same run and the same simulated figures
