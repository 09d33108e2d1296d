"""Starting the planned vLLM servers, with a fake ``vllm`` on PATH (a small Python script written here).

The fake records its arguments and environment, loads for a moment, then answers /health and /v1/models
(checking the bearer key like vLLM); one named model crashes instead, another never gets ready.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ctrl_c_as_at_a_terminal

from benchfill import placement
from benchfill.config import load_config
from benchfill.errors import ConfigError, EndpointError
from benchfill.serving import start_servers, stop_servers, vllm_commands, watch, write_script

KEY, OTHER_KEY = "vk-secret-value-0001", "pk-other-value-0002"
FAKE_VLLM = r'''#!{python}
import json, os, signal, socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
model, port = args[args.index("--served-model-name") + 1], int(args[args.index("--port") + 1])
rec = os.environ["FAKE_VLLM_RECORD"]
env = {{k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "VLLM_API_KEY")}}
with open(os.path.join(rec, f"{{port}}.json"), "w") as f:
    json.dump({{"argv": sys.argv, "env": env, "pid": os.getpid(), "started": time.time()}}, f)
signal.signal(signal.SIGTERM, lambda *a: (open(os.path.join(rec, f"{{port}}.stopped"), "w").close(), os._exit(0)))
print(f"INFO loading {{model}}", flush=True)
if model in os.environ.get("FAKE_VLLM_HANG", "").split(","):
    time.sleep(3600)
time.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0.5")))
if model in os.environ.get("FAKE_VLLM_SLOW", "").split(","):  # a large model, loading on
    time.sleep(20)
if model in os.environ.get("FAKE_VLLM_CRASH", "").split(","):
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
    sys.exit(1)
key = os.environ.get("VLLM_API_KEY")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        code, body = 404, b""
        if self.path == "/health":
            code = 200
        elif self.path == "/v1/models":
            if key and self.headers.get("Authorization") != f"Bearer {{key}}":
                code, body = 401, b'{{"error": "Unauthorized"}}'
            else:
                code, body = 200, json.dumps({{"object": "list", "data": [{{"id": model, "object": "model"}}]}}).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


print("INFO Application startup complete.", flush=True)
if model in os.environ.get("FAKE_VLLM_DIE", "").split(","):
    import threading
    hub = os.environ.get("HUGGING_FACE_HUB_TOKEN")
    threading.Timer(1.0, lambda: (print(f"RuntimeError: NCCL watchdog timeout (api key {{key}}, hub {{hub}})",
                                        flush=True), os._exit(9))).start()
host = args[args.index("--host") + 1]
ThreadingHTTPServer.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
ThreadingHTTPServer((host, port), Handler).serve_forever()
'''


def free_ports(n):
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fake GPU host: vllm on PATH, keys in the environment, three models 40/30/30 GiB on 2x80 GiB."""
    bin_dir, rec = tmp_path / "bin", tmp_path / "rec"
    bin_dir.mkdir()
    rec.mkdir()
    (bin_dir / "vllm").write_text(FAKE_VLLM.format(python=sys.executable))
    (bin_dir / "vllm").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_VLLM_RECORD": str(rec),
           "FAKE_VLLM_DELAY": "0.6", "VLLM_API_KEY": KEY, "PANEL_KEY": OTHER_KEY, "HF_HOME": str(tmp_path / "hf")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ports = free_ports(3)
    cfg = tmp_path / "panel.toml"
    cfg.write_text("".join(
        f'[[probes]]\nname = "{n}"\nbase_url = "http://127.0.0.1:{port}/v1"\nmodel = "org/{n}"\n'
        f'gpu_memory_gb = {gb}\napi_key_env = "{key}"\n'
        for (n, gb, key), port in zip([("a", 40, "VLLM_API_KEY"), ("b", 30, "PANEL_KEY"), ("c", 30, "VLLM_API_KEY")],
                                      ports, strict=True)))
    yield tmp_path, cfg, ports, rec
    for r in rec.glob("*.json"):  # nothing the test started outlives it
        pid = json.loads(r.read_text())["pid"]
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def records(rec: Path) -> dict[int, dict]:
    return {int(p.stem): json.loads(p.read_text()) for p in rec.glob("*.json")}


def no_key_on_any_command_line(servers: list[int]) -> None:
    """Every process's argv on this machine, as /proc shows it to anyone, holds neither key."""
    seen = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes()
        except OSError:  # gone meanwhile
            continue
        seen.add(int(cmdline.parent.name))
        assert KEY.encode() not in argv and OTHER_KEY.encode() not in argv, (cmdline, argv)
    assert set(servers) <= seen  # the servers' own command lines were among those read


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone
    except (FileNotFoundError, ProcessLookupError):
        return False


def read_until(stream, marker: str, timeout_s: float = 30) -> str:
    seen, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"{marker!r} never came; got: {''.join(seen)}")


def test_start_pins_each_server_keeps_keys_off_argv_waits_and_stops_on_ctrl_c(host):
    tmp, cfg, ports, rec = host
    proc = _serve_start(cfg, tmp, ctrl_c_as_at_a_terminal)
    try:
        err = read_until(proc.stderr, "all 3 servers ready")
        r = records(rec)
        # The plan: a (40 GiB) alone on GPU 0; b and c (30 GiB each) share GPU 1, c started once b is ready.
        assert {p: r[p]["env"]["CUDA_VISIBLE_DEVICES"] for p in ports} == dict(zip(ports, "011", strict=True))
        assert all(r[p]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" for p in ports)
        shares = {p: float(r[p]["argv"][r[p]["argv"].index("--gpu-memory-utilization") + 1]) for p in ports}
        assert shares[ports[0]] <= 0.9 and shares[ports[1]] + shares[ports[2]] <= 0.9
        assert shares[ports[1]] * 80 >= 30 and shares[ports[2]] * 80 >= 30 and shares[ports[0]] * 80 >= 40
        assert r[ports[2]]["started"] >= r[ports[1]]["started"] + 0.6  # after b loaded (0.6 s) and answered
        # separate GPUs: together, each started before the other could be ready (0.6 s of loading)
        assert abs(r[ports[1]]["started"] - r[ports[0]]["started"]) < 0.6
        # Keys: in each server's environment as VLLM_API_KEY, on no command line anywhere.
        assert [r[p]["env"]["VLLM_API_KEY"] for p in ports] == [KEY, OTHER_KEY, KEY]
        assert all("--api-key" not in r[p]["argv"] for p in ports)
        no_key_on_any_command_line([r[p]["pid"] for p in ports])
        for p in ports:
            assert "ready: org/" in err and f"on http://127.0.0.1:{p}/v1" in err
            assert (tmp / "logs" / f"vllm-{p}.log").read_text().startswith("INFO loading org/")
        assert all(alive(r[p]["pid"]) for p in ports)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(timeout=20) == 130  # stopped: a supervisor tells it from a clean exit
        assert "stopping 3 servers" in proc.stderr.read()
        assert proc.stdout.read().startswith("model ")  # the plan came first
        assert not any(alive(r[p]["pid"]) for p in ports)
        assert all((rec / f"{p}.stopped").exists() for p in ports)  # each got SIGTERM, none was left over
    finally:
        if proc.poll() is None:
            proc.kill()


def _commands(cfg, gpus="2x80"):
    return vllm_commands(placement.plan(placement.servers(load_config(cfg)), placement.parse_gpus_option(gpus)))


def test_a_server_that_crashes_is_named_with_its_log_tail_and_the_others_stop(host, monkeypatch):
    tmp, cfg, ports, rec = host
    monkeypatch.setenv("FAKE_VLLM_CRASH", "org/b")
    (tmp / "logs").mkdir()  # a log left by an earlier run on the same port: none of its lines is shown
    (tmp / "logs" / f"vllm-{ports[1]}.log").write_text("RuntimeError: an earlier run's failure\n")
    out = io.StringIO()
    with pytest.raises(EndpointError) as err:
        start_servers(_commands(cfg), tmp / "logs", wait_s=30, poll_s=0.1, out=out)
    log = (tmp / "logs" / f"vllm-{ports[1]}.log").read_text()
    assert "earlier run" not in out.getvalue() and "earlier run" not in log
    assert str(err.value) == (f"vllm for org/b on port {ports[1]} (GPU 1) exited with code 1 before it was ready; "
                              f"log: {tmp / 'logs' / f'vllm-{ports[1]}.log'} (last lines above)")
    assert "  | torch.OutOfMemoryError: CUDA out of memory" in out.getvalue()
    r = records(rec)
    assert ports[2] not in r  # c was to start after b: it never did
    assert not alive(r[ports[0]]["pid"]) and (rec / f"{ports[0]}.stopped").exists()


def test_a_server_that_misses_its_deadline_is_named_and_stopped(host, monkeypatch):
    tmp, cfg, ports, rec = host
    monkeypatch.setenv("FAKE_VLLM_HANG", "org/a")
    out = io.StringIO()
    with pytest.raises(EndpointError, match=rf"^vllm for org/a on port {ports[0]} \(GPU 0\) not ready after 1 s; "):
        start_servers(_commands(cfg), tmp / "logs", wait_s=1, poll_s=0.1, progress_s=0.3, out=out)
    assert re.search(r"waiting \d s for 2 server\(s\) to load: org/a \(port \d+\)", out.getvalue())
    assert "  | INFO loading org/a" in out.getvalue()
    assert not any(alive(r["pid"]) for r in records(rec).values())


def test_a_server_that_dies_after_it_was_ready_is_reported(host, monkeypatch):
    tmp, cfg, ports, rec = host
    monkeypatch.setenv("FAKE_VLLM_DIE", "org/c")  # the last to start: start_servers has returned by then
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0.1")
    cmds, out = _commands(cfg), io.StringIO()
    procs = start_servers(cmds, tmp / "logs", wait_s=30, poll_s=0.05, out=out)
    try:
        with pytest.raises(EndpointError, match=rf"^vllm for org/c on port {ports[2]} \(GPU 1\) exited with code 9; "):
            watch(cmds, procs, tmp / "logs", poll_s=0.05, out=out)
        assert "  | RuntimeError: NCCL watchdog timeout" in out.getvalue()
    finally:
        stop_servers(procs)
    assert not any(alive(r["pid"]) for r in records(rec).values())


def test_nothing_starts_without_the_key_or_without_vllm(host, monkeypatch):
    tmp, cfg, ports, rec = host
    monkeypatch.delenv("PANEL_KEY")
    with pytest.raises(ConfigError, match="^api_key_env: environment variable PANEL_KEY is not set"):
        start_servers(_commands(cfg), tmp / "logs")
    monkeypatch.setenv("PATH", str(tmp))
    with pytest.raises(EndpointError, match="^vllm: not found on PATH; install the extra"):
        start_servers(_commands(cfg), tmp / "logs")
    assert records(rec) == {}


@pytest.mark.parametrize("crash", [False, True])
def test_the_written_script_makes_the_same_plan_and_the_same_waiting(host, monkeypatch, crash):
    tmp, cfg, ports, rec = host
    if crash:
        monkeypatch.setenv("FAKE_VLLM_CRASH", "org/b")
    script = write_script(_commands(cfg), tmp / "serve.sh", log_dir=str(tmp / "logs"), wait_s=30)
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "POLL_S": "0.1"}, preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        if crash:
            assert proc.wait(timeout=30) == 3
            err = proc.stderr.read()
            assert f"vllm for org/b on port {ports[1]} exited before it was ready; last lines of" in err
            assert "  | torch.OutOfMemoryError" in err
            assert not any(alive(r["pid"]) for r in records(rec).values()) and ports[2] not in records(rec)
            return
        read_until(proc.stderr, "all 3 servers ready")
        r = records(rec)
        assert [r[p]["env"]["CUDA_VISIBLE_DEVICES"] for p in ports] == ["0", "1", "1"]
        assert [r[p]["env"]["VLLM_API_KEY"] for p in ports] == [KEY, OTHER_KEY, KEY]
        assert r[ports[2]]["started"] >= r[ports[1]]["started"] + 0.6
        no_key_on_any_command_line([r[p]["pid"] for p in ports])
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
        assert not any(alive(r[p]["pid"]) for p in ports)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_stop_servers_ends_whole_process_groups(tmp_path):
    # vLLM runs its engine in a child process: stopping the server must not leave it behind.
    child_pid = tmp_path / "child"
    code = (f"import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            f" open({str(child_pid)!r}, 'w').write(str(c.pid)); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 10
    while not child_pid.exists() or not child_pid.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    engine = int(child_pid.read_text())
    stop_servers([p], grace_s=5)
    time.sleep(0.2)
    assert p.poll() is not None and not alive(engine)


def test_the_script_sees_a_crash_in_its_wave_while_another_server_still_loads(host, monkeypatch):
    """Two servers start together; one loads on and on, the other dies at once: the script names the dead
    one at once instead of waiting out the first one's deadline."""
    tmp, cfg, ports, rec = host
    monkeypatch.setenv("FAKE_VLLM_HANG", "org/a")
    monkeypatch.setenv("FAKE_VLLM_CRASH", "org/b")
    script = write_script(_commands(cfg), tmp / "serve.sh", log_dir=str(tmp / "logs"), wait_s=600)
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "POLL_S": "0.1"})
    assert proc.returncode == 3 and time.monotonic() - t0 < 30
    assert f"vllm for org/b on port {ports[1]} exited before it was ready" in proc.stderr
    assert not any(alive(r["pid"]) for r in records(rec).values())  # the loading one is stopped too


@pytest.mark.parametrize("how", ["start", "script"])
def test_a_server_of_an_earlier_wave_that_exits_while_a_later_one_loads_stops_both_paths_at_once(host, monkeypatch,
                                                                                               how):
    # it had gone unseen until every later wave had loaded (minutes of a 70B model), then "all ready" was said;
    # the script's log tail showed the key, which --start masks; its readiness checks went through http_proxy
    tmp, cfg, ports, rec = host
    monkeypatch.setenv("FAKE_VLLM_DIE", "org/a")  # wave 1, dies a second after it is ready
    monkeypatch.setenv("FAKE_VLLM_SLOW", "org/c")  # wave 2, loads for 20 s
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0.1")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hub-SECRET-77")
    t0 = time.monotonic()
    if how == "start":
        out = io.StringIO()
        with pytest.raises(EndpointError, match=rf"^vllm for org/a on port {ports[0]} \(GPU 0\) exited with code 9 "
                                                "while a later wave loaded"):
            start_servers(_commands(cfg), tmp / "logs", wait_s=60, poll_s=0.1, out=out)
        err = out.getvalue()
    else:
        script = write_script(_commands(cfg), tmp / "serve.sh", log_dir=str(tmp / "logs"), wait_s=60)
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "POLL_S": "0.1", "http_proxy": "http://127.0.0.1:9",
                                   "HTTP_PROXY": "http://127.0.0.1:9", "no_proxy": "", "NO_PROXY": ""})
        assert proc.returncode == 3, proc.stderr
        err = proc.stderr
        assert f"vllm for org/a on port {ports[0]} exited while a later wave loaded; last lines of" in err
        assert "all 3 servers ready" not in err
    assert time.monotonic() - t0 < 15  # not after org/c's 20 s
    assert "  | RuntimeError: NCCL watchdog timeout (api key ***, hub ***)" in err and KEY not in err
    assert "hub-SECRET-77" not in err
    assert not any(alive(r["pid"]) for r in records(rec).values())


def test_the_script_names_a_server_that_exits_after_all_were_ready(host, monkeypatch):
    tmp, cfg, ports, rec = host
    monkeypatch.setenv("FAKE_VLLM_DIE", "org/c")
    monkeypatch.setenv("FAKE_VLLM_DELAY", "0.1")
    script = write_script(_commands(cfg), tmp / "serve.sh", log_dir=str(tmp / "logs"), wait_s=60)
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "POLL_S": "0.1"})
    assert proc.returncode == 3
    assert f"vllm for org/c on port {ports[2]} exited after all were ready; last lines of" in proc.stderr
    assert not any(alive(r["pid"]) for r in records(rec).values())


def test_a_log_folder_the_script_cannot_write_to_is_refused_in_one_line(host, tmp_path):
    tmp, cfg, ports, rec = host
    script = write_script(_commands(cfg), tmp / "serve.sh", log_dir=str(tmp / "logs"), wait_s=60)
    (tmp_path / "file").write_text("")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LOG_DIR": str(tmp_path / "file" / "logs")})
    assert proc.returncode == 2 and proc.stderr == (f"serve.sh: LOG_DIR={tmp_path / 'file' / 'logs'}: cannot write "
                                                    "the servers' logs there\n")
    assert records(rec) == {}


def test_a_log_folder_is_data_in_the_script_never_shell_code(host):
    tmp, cfg, ports, rec = host
    evil = f'logs" $(touch {tmp}/PWNED) "x'
    script = write_script(_commands(cfg), tmp / "serve.sh", log_dir=evil, wait_s=30)
    line = next(ln for ln in script.read_text().splitlines() if ln.startswith("DEFAULT_LOG_DIR="))
    out = subprocess.run(["bash", "-c", f'{line}\nprintf %s "$DEFAULT_LOG_DIR"'], capture_output=True, text=True)
    assert out.stdout == evil and not (tmp / "PWNED").exists()


def test_the_script_passes_keys_to_no_program_as_an_argument(host):
    """`VLLM_API_KEY="$PANEL_KEY"` is the shell's assignment before the whole command: were it an argument of
    setsid or env (`$SETSID env VLLM_API_KEY=...`), the key would be in their argument lists, which every
    process can read in /proc while they start. Stand-ins for both on PATH record each argv they get."""
    import shutil

    tmp, cfg, ports, rec = host
    for tool in ("setsid", "env"):
        real = shutil.which(tool)
        if tool == "setsid" and real is None:
            continue  # the script then runs env directly
        (tmp / "bin" / tool).write_text(f'#!/bin/sh\nprintf "%s\\n" "{tool} $*" >> "{rec}/argv.log"\nexec {real} "$@"\n')
        (tmp / "bin" / tool).chmod(0o755)
    script = write_script(_commands(cfg), tmp / "serve.sh", log_dir=str(tmp / "logs"), wait_s=30)
    assert 'VLLM_API_KEY="$PANEL_KEY" $SETSID env ' in script.read_text()
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "POLL_S": "0.1"}, preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        read_until(proc.stderr, "all 3 servers ready")
        r = records(rec)
        assert [r[p]["env"]["VLLM_API_KEY"] for p in ports] == [KEY, OTHER_KEY, KEY]  # it still gets there
        argv = (rec / "argv.log").read_text()
        assert argv.count("env ") >= 3 and " vllm serve " in argv
        assert KEY not in argv and OTHER_KEY not in argv, argv
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
    finally:
        if proc.poll() is None:
            proc.kill()


def hangup_as_at_a_terminal():
    """In the child, before exec: SIGINT and SIGHUP at their defaults, as a command typed at a terminal
    has them (the suite may run under nohup, which its children would inherit)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def test_a_closed_terminal_stops_every_server_as_ctrl_c_does(host):
    """SIGHUP (the terminal closed, the ssh session dropped) ends `probes serve --start` through the same
    cleanup as Ctrl-C: the servers run in sessions of their own, so the hangup reaches none of them."""
    tmp, cfg, ports, rec = host
    proc = _serve_start(cfg, tmp, hangup_as_at_a_terminal)
    try:
        read_until(proc.stderr, "all 3 servers ready")
        pids = [r["pid"] for r in records(rec).values()]
        assert len(pids) == 3 and all(alive(p) for p in pids)
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=20) == 129  # 128 + SIGHUP, after the servers were stopped as Ctrl-C stops them
        assert "stopping 3 servers" in proc.stderr.read()
        assert not any(alive(p) for p in pids) and all((rec / f"{p}.stopped").exists() for p in ports)
    finally:
        if proc.poll() is None:
            proc.kill()
    for r in rec.iterdir():
        r.unlink()
    # while they load: the command ends as terminated by SIGHUP (128 + 1), the servers with it
    proc = subprocess.Popen([sys.executable, "-m", "benchfill", "probes", "serve", "--config", str(cfg),
                             "--gpus", "2x80", "--start", "--log-dir", str(tmp / "logs"), "--poll", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FAKE_VLLM_HANG": "org/a,org/b"}, preexec_fn=hangup_as_at_a_terminal)
    try:
        deadline = time.monotonic() + 30
        while len(records(rec)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [r["pid"] for r in records(rec).values()]
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=40) == 129 and proc.stderr.read().endswith("benchfill: terminated\n")
        assert len(pids) == 2 and not any(alive(p) for p in pids)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_hangup_ignored_by_nohup_stays_ignored():
    from benchfill.cli import _on_sigterm

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        previous = _on_sigterm(hangup=True)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and list(previous) == [signal.SIGTERM]
        signal.signal(signal.SIGTERM, previous[signal.SIGTERM])
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_port_that_already_answers_is_refused_before_anything_starts(host):
    """A server left from an earlier run (orphaned, or still running) on a planned port would answer the
    readiness checks for the new one, while the new one fails to bind: refused in one line, by --start
    and by the script."""
    import socket

    tmp, cfg, ports, rec = host
    with socket.socket() as left:
        left.bind(("127.0.0.1", ports[1]))
        left.listen()
        with pytest.raises(EndpointError, match=rf"^port {ports[1]} on 127.0.0.1 already answers \(a server "
                                                r"left from an earlier run\?\); stop it before serving org/b"):
            start_servers(_commands(cfg), tmp / "logs", wait_s=30, poll_s=0.1, out=io.StringIO())
        script = write_script(_commands(cfg), tmp / "serve.sh", log_dir=str(tmp / "logs"), wait_s=30)
        out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 3  # as --start's EndpointError, and the script's other endpoint reports
    assert out.stderr == (f"serve.sh: port {ports[1]} on 127.0.0.1 already answers (a server left from an earlier "
                          "run?)\n")
    assert records(rec) == {}


def test_a_probe_on_ipv6_loopback_is_served_and_waited_for(host, tmp_path):
    """http://[::1]:PORT/v1: the server listens on ::1 and readiness is asked at http://[::1]:PORT, by
    --start and by the script."""
    tmp, _, ports, rec = host
    cfg = tmp_path / "v6.toml"
    cfg.write_text(f'[[probes]]\nname = "a"\nbase_url = "http://[::1]:{ports[0]}/v1"\nmodel = "org/a"\n'
                   'gpu_memory_gb = 10\napi_key_env = "VLLM_API_KEY"\n')
    cmds, out = _commands(cfg), io.StringIO()
    assert cmds[0].argv[cmds[0].argv.index("--host") + 1] == "::1"
    procs = start_servers(cmds, tmp / "logs", wait_s=30, poll_s=0.1, out=out)
    stop_servers(procs)
    assert f"ready: org/a on http://[::1]:{ports[0]}/v1" in out.getvalue()
    script = write_script(cmds, tmp / "serve.sh", log_dir=str(tmp / "logs"), wait_s=30)
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "POLL_S": "0.1"}, preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        assert f"ready: org/a on http://[::1]:{ports[0]}/v1" in read_until(proc.stderr, "all 1 servers ready")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_script_refuses_wait_and_poll_it_cannot_count_with(host):
    tmp, cfg, ports, rec = host
    script = write_script(_commands(cfg), tmp / "serve.sh", log_dir=str(tmp / "logs"), wait_s=0.5)
    assert 'WAIT_S="${WAIT_S:-1}"' in script.read_text()  # rounded up: bash counts whole seconds
    for var, value, said in [("WAIT_S", "1.5", "expected whole seconds, more than 0"),
                             ("WAIT_S", "0", "expected whole seconds, more than 0"),
                             ("POLL_S", "soon", "expected seconds, e.g. 2 or 0.5")]:
        out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30,
                             env={**os.environ, var: value})
        assert (out.returncode, out.stderr) == (2, f"serve.sh: {var}={value}: {said}\n")
    assert records(rec) == {}


def test_serve_options_refuse_what_they_cannot_use(host, capsys):
    from benchfill.cli import main

    tmp, cfg, ports, rec = host
    base = ["probes", "serve", "--config", str(cfg), "--gpus", "2x80"]
    for bad, said in [(["--poll", "-1"], "argument --poll: must be more than 0, got -1"),
                      (["--wait", "nan"], "argument --wait: must be a finite number, got nan"),
                      (["--wait", "-5"], "argument --wait: must be more than 0, got -5"),
                      (["--port-base", "9000"], "unrecognized arguments: --port-base 9000")]:
        with pytest.raises(SystemExit) as exit_:
            main(base + bad)
        assert exit_.value.code == 2 and said in capsys.readouterr().err
    # a key passed to vLLM as an argument would be in the script and on every process's view of /proc
    for arg in ("--vllm-arg=--api-key=sk-pasted-0003", "--vllm-arg=--api_key=sk-pasted-0003",
                "--vllm-arg=--api-k"):
        assert main(base + ["--write", str(tmp / "serve.sh"), arg]) == 2
        err = capsys.readouterr().err
        assert err.startswith("benchfill: error: --vllm-arg --api") and "api_key_env" in err and "sk-" not in err
        assert not (tmp / "serve.sh").exists()
    assert main(base + ["--vllm-arg=--api-server-count=2"]) == 0  # another option of the same prefix passes
    assert "--api-server-count=2" in capsys.readouterr().out
    for arg in ("--vllm-arg=--kv-cache-memory=10G", "--vllm-arg=--dtype=float32", "--vllm-arg=--cpu-offload-gb=8"):
        assert main(base + [arg]) == 2  # each would undo the plan's memory split
        assert "which the plan sets from" in capsys.readouterr().err


def _serve_start(cfg, tmp, preexec):
    """`probes serve --start` of the host fixture's panel on two 80 GB GPUs, as a terminal would start it."""
    return subprocess.Popen([sys.executable, "-m", "benchfill", "probes", "serve", "--config", str(cfg),
                             "--gpus", "2x80", "--start", "--log-dir", str(tmp / "logs"), "--poll", "0.1",
                             "--wait", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=preexec)


def test_a_second_ctrl_c_while_servers_stop_kills_them_at_once(tmp_path):
    # A server that ignores SIGTERM (a vLLM slow to shut down) and a Ctrl-C during the grace: every server
    # was left running in its own session, holding its port, and nothing said so
    import signal
    import threading

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(120)"
    procs = [subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        assert p.stdout.readline().strip() == b"up"  # its handler is set
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        stop_servers(procs, grace_s=60)
    assert time.monotonic() - t0 < 10 and all(p.poll() is not None for p in procs)
