"""QA findings on `probes serve` and `sim serve`: a --vllm-arg that overrules the plan, an https probe URL
served over plain HTTP, a stop after "ready" that exited 0, a --write into a folder not yet made, and a key
pasted as --api-key-env echoed back. The servers are test_serving's fake ``vllm`` on PATH."""

from __future__ import annotations

import signal
import stat
import subprocess
import sys

import pytest
import test_serving
from conftest import ctrl_c_as_at_a_terminal
from test_serving import alive, hangup_as_at_a_terminal, read_until, records

from benchfill.cli import main

host = test_serving.host  # the fake GPU host: vllm on PATH, a three-probe panel, its ports


def _one_probe(tmp, port, url=None):
    cfg = tmp / "one.toml"
    cfg.write_text(f'[[probes]]\nname = "a"\nbase_url = "{url or f"http://127.0.0.1:{port}/v1"}"\n'
                   'model = "org/a"\ngpu_memory_gb = 10\napi_key_env = "VLLM_API_KEY"\n')
    return cfg


@pytest.mark.parametrize("arg, flag", [
    ("--vllm-arg=--gpu-memory-utilization=0.99", "--gpu-memory-utilization"),
    ("--vllm-arg=--port=9999", "--port"),
    ("--vllm-arg=--host 0.0.0.0", "--host"),  # "--flag value" as one argument
    ("--vllm-arg=--served_model_name=other", "--served-model-name"),  # vLLM reads _ as -
    ("--vllm-arg=--max-model-len", "--max-model-len"),  # its value in the next --vllm-arg
    ("--vllm-arg=--gpu-memory-util=0.99", "--gpu-memory-utilization"),  # a prefix vLLM takes for it
    ("--vllm-arg=-tp=4", "--tensor-parallel-size"),
    ("--vllm-arg=--seed=7", "--seed"),
    ("--vllm-arg=--max-num-seqs=512", "--max-num-seqs"),
])
def test_a_vllm_arg_setting_a_planned_flag_is_refused_before_anything(host, capsys, arg, flag):
    tmp, cfg, ports, rec = host
    script = tmp / "serve.sh"
    code = main(["probes", "serve", "--config", str(cfg), "--gpus", "2x80", "--write", str(script), arg])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("benchfill: error: --vllm-arg -") and f": sets {flag}, which the plan sets" in err
    assert err.count("\n") == 1 and "0.99" not in err and "9999" not in err
    assert out == "" and not script.exists() and records(rec) == {}


def test_a_vllm_arg_the_plan_leaves_alone_still_passes(host, capsys):
    tmp, cfg, ports, rec = host
    assert main(["probes", "serve", "--config", str(cfg), "--gpus", "2x80", "--vllm-arg=--enable-prefix-caching",
                 "--vllm-arg=--generation-config=vllm"]) == 0
    out = capsys.readouterr().out
    assert "--enable-prefix-caching" in out and "--generation-config=vllm" in out


def test_an_https_probe_url_is_refused_naming_the_probe(host, tmp_path, capsys):
    """vLLM serves plain HTTP: an https:// probe would fail every call while the http:// readiness checks pass."""
    tmp, _, ports, rec = host
    cfg = _one_probe(tmp_path, ports[0], url=f"https://127.0.0.1:{ports[0]}/v1")
    assert main(["probes", "serve", "--config", str(cfg), "--gpus", "1x80", "--write", str(tmp_path / "s.sh")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"benchfill: error: {cfg}: probes.a.base_url: https://") and "http://" in err
    assert "proxy" in err and err.count("\n") == 1 and not (tmp_path / "s.sh").exists()
    # --start, in a process of its own: unfixed, it would report the server ready and keep it
    proc = subprocess.Popen([sys.executable, "-m", "benchfill", "probes", "serve", "--config", str(cfg), "--gpus",
                             "1x80", "--start", "--log-dir", str(tmp_path / "logs"), "--poll", "0.1", "--wait", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2 and "probes.a.base_url: https://" in err and "ready" not in err
    assert records(rec) == {}


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_after_all_are_ready_exits_as_stopped_and_stops_the_servers(host, tmp_path, sig, code):
    tmp, _, ports, rec = host
    cfg = _one_probe(tmp_path, ports[0])
    preexec = hangup_as_at_a_terminal if sig == signal.SIGHUP else ctrl_c_as_at_a_terminal
    proc = subprocess.Popen([sys.executable, "-m", "benchfill", "probes", "serve", "--config", str(cfg),
                             "--gpus", "1x80", "--start", "--log-dir", str(tmp_path / "logs"), "--poll", "0.1",
                             "--wait", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=preexec)
    try:
        read_until(proc.stderr, "all 1 servers ready")
        pid = records(rec)[ports[0]]["pid"]
        proc.send_signal(sig)
        assert proc.wait(timeout=40) == code
        err = proc.stderr.read()
        assert "stopping 1 servers" in err
        assert err.endswith("benchfill: interrupted\n" if sig == signal.SIGINT else "benchfill: terminated\n")
        assert not alive(pid) and (rec / f"{ports[0]}.stopped").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_write_makes_the_scripts_folder_and_refuses_a_path_no_file_can_take(host, capsys):
    tmp, cfg, ports, rec = host
    base = ["probes", "serve", "--config", str(cfg), "--gpus", "2x80"]
    script = tmp / "nodir" / "deeper" / "serve.sh"
    assert main(base + ["--write", str(script)]) == 0
    assert script.read_text().startswith("#!/usr/bin/env bash") and script.stat().st_mode & stat.S_IXUSR
    assert not list(script.parent.glob("*.tmp"))
    capsys.readouterr()
    # under a file: named with the user's path, before the plan is printed
    (tmp / "afile").write_text("x")
    assert main(base + ["--write", str(tmp / "afile" / "serve.sh")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"benchfill: error: --write '{tmp / 'afile' / 'serve.sh'}': ")
    assert ".tmp" not in err
    # the config itself: refused, left as it was
    before = cfg.read_text()
    assert main(base + ["--write", str(cfg)]) == 2
    assert "is the --config file" in capsys.readouterr().err and cfg.read_text() == before


@pytest.mark.parametrize("name", ["sk-ABCDEFabcdef1234567890xyz", "ABCDEFabcdef1234567890xyzQ", "PANEL-KEY"])
def test_sim_serve_refuses_a_key_or_a_non_name_as_api_key_env_without_echoing_it(capsys, name):
    assert main(["sim", "serve", "--benchmark", "demo", "--api-key-env", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith("benchfill: error: sim serve: --api-key-env: ") and name not in err
    assert err.count("\n") == 1


def test_vllm_args_that_would_use_more_gpus_than_planned_or_another_model_are_refused():
    # the plan pins CUDA_VISIBLE_DEVICES to tp GPUs: data or pipeline parallelism fails at start-up
    from benchfill.errors import ConfigError
    from benchfill.serving import check_vllm_args

    for arg, owned in (("--data-parallel-size=2", "--data-parallel-size"), ("-pp 2", "--pipeline-parallel-size"),
                       ("-dp=2", "--data-parallel-size"), ("--model=foo", "--model")):
        with pytest.raises(ConfigError, match=rf"^--vllm-arg \S+: sets {owned}, which the plan sets"):
            check_vllm_args([arg])
    check_vllm_args(["--enforce-eager", "--generation-config=vllm"])


def test_a_hub_token_never_reaches_the_script_nor_the_log_tail_shown(tmp_path, monkeypatch):
    # --vllm-arg=--hf-token=... was written into serve.sh and onto vLLM's command line; a server's log
    # tail was shown as it was
    from benchfill.errors import ConfigError, EndpointError
    from benchfill.serving import ServeCommand, check_vllm_args, fail

    token = "hf_LEAKTESTccccccccccccccccccccccc"
    for arg in (f"--hf-token={token}", f"--hf_token={token}", f"--hf-tok={token}", "--hf-token",
                f"--hf-overrides={token}", "--served-model-name sk-LEAKTESTaaaaaaaaaaaa"):
        with pytest.raises(ConfigError, match=r"^--vllm-arg --\S+: ") as err:
            check_vllm_args([arg])
        assert "LEAKTEST" not in str(err.value)
    check_vllm_args(["--hf-config-path=org/cfg"])  # another option of the --hf- prefix passes
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("MY_PROBE_KEY", "LEAKTESTpanelDDDDDDDDzz")
    cmd = ServeCommand(model="org/a", port=8001, argv=[], gpus=(0,), wave=0, key_env="MY_PROBE_KEY")
    (tmp_path / "vllm-8001.log").write_text(f"args: --hf-token={token}\nVLLM_API_KEY=LEAKTESTpanelDDDDDDDDzz\n")
    import io

    out = io.StringIO()
    with pytest.raises(EndpointError):
        fail(cmd, tmp_path, "exited with code 1", out)
    assert "LEAKTEST" not in out.getvalue() and out.getvalue().count("  | ") == 2
