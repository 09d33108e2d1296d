"""The placement plan, driven by recorded nvidia-smi outputs and real models' config.json in a tmp HF cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hf_cache import CONFIGS, PARAMS_B, config_json, write_cache

from benchfill import placement
from benchfill.config import load_config
from benchfill.errors import ConfigError
from benchfill.placement import GIB, OVERHEAD_GIB

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "panel.example.toml"
# `nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader,nounits`, as recorded.
NVIDIA_SMI = {
    "1x141": "0, NVIDIA H200, 143771, 0\n",
    "8x80": "".join(f"{i}, NVIDIA H100 80GB HBM3, 81559, 0\n" for i in range(8)),
    "1x24": "0, NVIDIA GeForce RTX 4090, 24564, 1\n",
}


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return write_cache(tmp_path / "hf")


def twelve_model_panel(tmp_path) -> Path:
    text = "".join(f'[[probes]]\nname = "p{i}"\nbase_url = "http://127.0.0.1:{8001 + i}/v1"\nmodel = "{m}"\n'
                   "trials = 8\nmax_tokens = 4096\nconcurrency = 16\n" for i, m in enumerate(CONFIGS))
    path = tmp_path / "panel12.toml"
    path.write_text(text)
    return path


def check_plan(plan: placement.Plan, servers: list[placement.Server]) -> None:
    """Every server placed once; on every GPU the shares sum to at most its cap (<= 0.9), and each server's
    share of each of its GPUs holds what it needs there; tensor parallelism divides the attention heads."""
    assert sorted(p.server.model for p in plan.placements) == sorted(s.model for s in servers)
    for g in plan.gpus:
        assert sum(p.share_m for p in plan.on_gpu(g.index)) <= g.cap_m <= 900
        assert sum(p.share * g.total_gib for p in plan.on_gpu(g.index)) <= 0.9 * g.total_gib + 1e-9
        for p in plan.on_gpu(g.index):
            assert p.share * g.total_gib >= p.server.per_gpu_gib(p.tp) - 1e-9
    for p in plan.placements:
        assert p.server.heads % p.tp == 0 and len(set(p.gpus)) == p.tp


def test_nvidia_smi_outputs_and_gpus_option_parse():
    h200, = placement.parse_nvidia_smi(NVIDIA_SMI["1x141"])
    assert (h200.index, h200.name, round(h200.total_gib, 1), h200.cap_m) == (0, "NVIDIA H200", 140.4, 900)
    assert len(placement.parse_nvidia_smi(NVIDIA_SMI["8x80"])) == 8
    busy = placement.parse_nvidia_smi("0, NVIDIA A100-SXM4-80GB, 81920, 20480\n")[0]
    assert busy.cap_m == 900 - 250  # another process holds a quarter: vLLM checks free memory at start-up
    with pytest.raises(ConfigError, match=r"^smi.txt:2: expected 'index, name, memory.total"):
        placement.parse_nvidia_smi("0, NVIDIA H200, 143771, 0\nNo devices were found\n", "smi.txt")
    assert [g.total_gib for g in placement.parse_gpus_option("8x80")] == [80.0] * 8
    assert [g.total_gib for g in placement.parse_gpus_option("80,80,24")] == [80.0, 80.0, 24.0]
    assert [g.total_gib for g in placement.parse_gpus_option("141")] == [141.0]
    with pytest.raises(ConfigError, match="^--gpus 'two': expected COUNTxGiB"):
        placement.parse_gpus_option("two")
    eight = placement.parse_gpus_option("8x80")
    assert [g.index for g in placement.visible(eight, {"CUDA_VISIBLE_DEVICES": "2,5"})] == [2, 5]
    assert placement.visible(eight, {}) == eight


def test_memory_estimates_from_config_match_the_model_cards(hf_home):
    for model, billions in PARAMS_B.items():
        assert placement.param_count(config_json(model)) / 1e9 == pytest.approx(billions, rel=0.02), model
    # Worked by hand for Llama-3.1-8B: 8.03e9 parameters x 2 bytes; KV per token 2 (K,V) x 32 layers x 8 kv
    # heads x 128 x 2 bytes = 131,072 bytes; 8 trials x (2048 + 4096) tokens x 131,072 B = exactly 6 GiB.
    cfg = load_config(EXAMPLE)
    s = {s.model: s for s in placement.servers(cfg)}["meta-llama/Llama-3.1-8B-Instruct"]
    assert placement.kv_bytes_per_token(config_json(s.model)) == 131072
    assert s.kv_gib == 6.0 and s.max_model_len == 2048 + 4096 and s.source == "config.json"
    assert s.weights_gib == pytest.approx(8.03e9 * 2 / GIB, rel=0.001)
    assert s.per_gpu_gib(1) == pytest.approx(s.weights_gib + 6.0 + OVERHEAD_GIB)
    assert s.per_gpu_gib(2) == pytest.approx((s.weights_gib + 6.0) / 2 + OVERHEAD_GIB)
    # A downloaded model's safetensors index gives the weights' exact size.
    snap = placement.model_dir(s.model)
    (snap / "model.safetensors.index.json").write_text('{"metadata": {"total_size": 16060522496}}')
    assert placement.servers(cfg)[2].weights_gib == pytest.approx(16060522496 / GIB)
    quant = {**config_json(s.model), "quantization_config": {"quant_method": "awq", "bits": 4}}
    assert placement.bytes_per_param(quant) == 0.5


@pytest.mark.parametrize("gpus", ["1x141", "8x80", "1x24"])
@pytest.mark.parametrize("panel", ["example", "twelve"])
def test_both_panels_on_recorded_gpus_fit_or_are_refused_by_how_much(hf_home, tmp_path, gpus, panel):
    cfg = load_config(EXAMPLE if panel == "example" else twelve_model_panel(tmp_path))
    servers = placement.servers(cfg)
    smi = placement.parse_nvidia_smi(NVIDIA_SMI[gpus])
    refused = {("example", "1x24"), ("twelve", "1x141"), ("twelve", "1x24")}
    if (panel, gpus) in refused:
        with pytest.raises(ConfigError) as err:
            placement.plan(servers, smi)
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith("the panel does not fit: ")
        # The largest server is placed first; on one GPU it is the one refused, short by its need minus 0.9.
        big = max(servers, key=lambda s: s.per_gpu_gib(1))
        short = big.per_gpu_gib(1) - smi[0].cap_m / 1000 * smi[0].total_gib
        assert f"{big.model} (probes " in msg and f"short by {short:.1f} GiB" in msg and short > 0
        return
    plan = placement.plan(servers, smi)
    check_plan(plan, servers)
    tps = {p.server.model: p.tp for p in plan.placements}
    if gpus == "1x141":  # the example panel: three servers share the H200, started one after another
        assert [len(w) for w in plan.waves()] == [1, 1, 1]
        # the room left is handed out; each server loses less than a thousandth to rounding down
        assert 900 - 3 < sum(p.share_m for p in plan.placements) <= 900
    else:  # 8x80: spread out; the models that fit no single 80 GB GPU are split with tensor parallelism
        cap = 0.9 * smi[0].total_gib
        split = {m: t for m, t in tps.items() if t > 1}
        assert split == ({} if panel == "example" else
                         {"Qwen/Qwen2.5-32B-Instruct": 2, "meta-llama/Llama-3.1-70B-Instruct": 4})
        for p in plan.placements:  # the smallest size that fits: half as many GPUs would not do
            assert p.server.per_gpu_gib(p.tp // 2) > cap if p.tp > 1 else p.server.per_gpu_gib(1) <= cap
        if panel == "example":
            assert len({p.gpus for p in plan.placements}) == 3 and len(plan.waves()) == 1


def test_a_panel_that_cannot_fit_is_refused_with_its_shortfall(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    path = tmp_path / "p.toml"
    path.write_text('[[probes]]\nname = "big"\nbase_url = "http://127.0.0.1:8001/v1"\nmodel = "org/big"\n'
                    'gpu_memory_gb = 12\n[[probes]]\nname = "nocfg"\nbase_url = "http://127.0.0.1:8002/v1"\n'
                    'model = "org/unknown"\n')
    with pytest.raises(ConfigError, match=r"^probes.nocfg.gpu_memory_gb: org/unknown has no config.json in "
                                          r"the Hugging Face cache \(.*empty/hub\)"):
        placement.servers(load_config(path))
    servers = placement.servers(load_config(path, ["probes.1.gpu_memory_gb=3"]))
    # By hand: 10 GiB x 0.9 = 9.0 GiB of room; the 12 GiB server is 3.0 GiB short, the panel (12 + 3 GiB) 6.0.
    with pytest.raises(ConfigError, match=r"org/big \(probes big\) needs 12.0 GiB on one GPU, the most room "
                                          r"left is 9.0 GiB, short by 3.0 GiB; 1 more server\(s\) not yet placed; "
                                          r"in all the panel needs 15.0 GiB, the GPUs offer 9.0, short by 6.0 GiB; "):
        placement.plan(servers, placement.parse_gpus_option("10"))
    # 12 GiB over two 10 GiB GPUs: 10/2 + 2 = 7 GiB (0.700) on each; the small one takes the third GPU.
    plan = placement.plan(servers, placement.parse_gpus_option("3x10"))
    assert [(p.gpus, p.need_m) for p in plan.placements] == [((0, 1), 700), ((2,), 300)]
    assert [p.share_m for p in plan.placements] == [900, 900]


def test_context_longer_than_the_model_is_refused_and_sampling_differences_warned(hf_home):
    with pytest.raises(ConfigError, match=r"^probes.qwen3-8b: max_prompt_tokens \+ max_tokens = 42048 exceeds "
                                          r"Qwen/Qwen3-8B's context of 40960 tokens"):
        placement.servers(load_config(EXAMPLE, ["probes.1.max_tokens=40000"]))
    cfg = load_config(EXAMPLE, ["probes.1.top_p=0.8"])
    warnings = placement.sampling_warnings(cfg, placement.servers(cfg))
    assert warnings == ["probes.qwen3-8b.top_p = 0.8 differs from 0.95 in Qwen/Qwen3-8B's generation_config.json; "
                        "the panel's value is used (docs/serving.md)"]
    cfg = load_config(EXAMPLE)
    assert placement.sampling_warnings(cfg, placement.servers(cfg)) == []


def test_probes_serve_prints_the_plan_and_writes_a_script_without_keys(hf_home, tmp_path, capsys):
    from benchfill.cli import main

    smi = tmp_path / "smi.csv"
    smi.write_text(NVIDIA_SMI["1x141"])
    script = tmp_path / "serve.sh"
    assert main(["probes", "serve", "--config", str(EXAMPLE), "--nvidia-smi", str(smi), "--write", str(script)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:5] == ["model", "GPUs", "TP", "needs", "share"]
    assert re.search(r"^GPU 0 \(NVIDIA H200, 140.4 GiB, 0.0 in use\): shares 0.89\d of 0.900$", out, re.M)
    text = script.read_text()
    starts = [ln for ln in text.splitlines() if " vllm serve " in ln]
    assert len(starts) == 3 and all(
        ln.startswith("$SETSID env CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 vllm serve") for ln in starts)
    assert all(re.search(r"--gpu-memory-utilization 0\.\d{3} --max-model-len \d+", ln) for ln in starts)
    assert "--api-key" not in text and ': "${VLLM_API_KEY:?' in text
    assert text.count('"$pid_') == 3 and "wait_wave" in text and "# model" in text  # the plan, as comments
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert main(["probes", "serve", "--config", str(EXAMPLE), "--gpus", "8x80", "--set", "probes.1.top_p=0.8"]) == 0
    cap = capsys.readouterr()
    assert cap.err == ("benchfill: warning: probes.qwen3-8b.top_p = 0.8 differs from 0.95 in Qwen/Qwen3-8B's "
                       "generation_config.json; the panel's value is used (docs/serving.md)\n")
    assert cap.out.count("CUDA_VISIBLE_DEVICES=") == 3 and "--api-key" not in cap.out  # no --write: the commands
    clash = tmp_path / "clash.toml"
    clash.write_text('[[probes]]\nname = "a"\nbase_url = "http://127.0.0.1:8101/v1"\nmodel = "m1"\n'
                     '[[probes]]\nname = "b"\nbase_url = "http://127.0.0.1:8101/v1"\nmodel = "m2"\n')
    assert main(["probes", "serve", "--config", str(clash), "--gpus", "1x80"]) == 2
    assert capsys.readouterr().err == (f"benchfill: error: {clash}: probes: m1 (probes a) and m2 (probes b) are "
                                       "served by separate servers but share port 8101; give each served model "
                                       "its own base_url port\n")


def test_readme_shows_the_plan_the_planner_makes_for_the_example_panel_on_one_h200(hf_home):
    plan = placement.plan(placement.servers(load_config(EXAMPLE)), placement.parse_nvidia_smi(NVIDIA_SMI["1x141"]))
    assert f"```text\n{plan.table()}\n```" in (ROOT / "README.md").read_text()


def _panel(tmp_path, *probes: tuple[str, str, str, str | None]) -> Path:
    cfg = tmp_path / "p.toml"
    cfg.write_text("".join(
        f'[[probes]]\nname = "{n}"\nbase_url = "{url}"\nmodel = "{m}"\ngpu_memory_gb = 20\n'
        + (f'api_key_env = "{k}"\n' if k else "") for n, url, m, k in probes))
    return cfg


def test_servers_refuse_what_their_probes_could_not_reach(tmp_path):
    with pytest.raises(ConfigError, match=r"probes.a.base_url: http://127.0.0.1/v1 names no port"):
        placement.servers(load_config(_panel(tmp_path, ("a", "http://127.0.0.1/v1", "org/m", None))))
    two = _panel(tmp_path, ("a", "http://127.0.0.1:8001/v1", "org/m", "KEY_A"),
                 ("b", "http://127.0.0.1:8002/v1", "org/m", "KEY_B"))
    with pytest.raises(ConfigError, match=r"probes.b: serves org/m as probes.a does, but at http://127.0.0.1:8002/v1"):
        placement.servers(load_config(two))
    with pytest.raises(ConfigError, match=r"field probes.0.api_key_env: String should match pattern"):
        load_config(_panel(tmp_path, ("a", "http://127.0.0.1:8001/v1", "org/m", "PANEL-KEY")))
    with pytest.raises(ConfigError, match=r"--gpus 'nan'"):
        placement.parse_gpus_option("nan")


def test_a_server_for_an_orchestrator_elsewhere_listens_on_the_address_its_probes_name(tmp_path):
    from benchfill.serving import vllm_commands

    cfg = load_config(_panel(tmp_path, ("a", "http://10.0.0.11:8001/v1", "org/m", None),
                             ("b", "http://127.0.0.1:8002/v1", "org/n", None)))
    plan = placement.plan(placement.servers(cfg), placement.parse_gpus_option("2x80"))
    hosts = {c.model: c.argv[c.argv.index("--host") + 1] for c in vllm_commands(plan)}
    assert hosts == {"org/m": "10.0.0.11", "org/n": "127.0.0.1"}


def test_a_panel_that_fits_in_total_but_not_in_pieces_says_so():
    def server(name, gib):  # one attention head: never split over GPUs
        return placement.Server(name, [name], 8000, None, 16, 1024, gib - OVERHEAD_GIB, 0.0, "config.json", heads=1)

    # two GPUs with 9 GiB of room each (18 in all); 8 + 8 + 1.5 = 17.5 GiB, but 1 GiB is left on each
    with pytest.raises(ConfigError, match=r"^the panel does not fit: c \(probes c\) needs 1.5 GiB on one GPU, the "
                                          r"most room left is 1.0 GiB, short by 0.5 GiB; in all the panel needs "
                                          r"17.5 GiB of the 18.0 the GPUs offer, but not in pieces its servers fit "
                                          r"in; lower trials"):
        placement.plan([server("a", 8), server("b", 8), server("c", 1.5)], placement.parse_gpus_option("2x10"))


def test_a_refusal_names_the_split_the_server_came_nearest_with():
    # the largest split tried had been named: a model short of 0.2 GiB on one GPU was said to need 2.1 GiB on each
    # of 2, short by 1.6
    def server(name, gib, heads=1):
        return placement.Server(name, [name], 8000, None, 16, 1024, gib - OVERHEAD_GIB, 0.0, "config.json",
                                heads=heads, kv_heads=heads)

    with pytest.raises(ConfigError, match=r"^the panel does not fit: c \(probes c\) needs 3.2 GiB on one GPU, the "
                                          r"most room left is 3.0 GiB, short by 0.2 GiB;"):
        placement.plan([server("a", 6), server("b", 8.5), server("c", 3.2, heads=2)],
                       placement.parse_gpus_option("10,10"))
    # weights no GPU here holds, even split as widely as it can be: fewer tokens or samples cannot help
    with pytest.raises(ConfigError, match=r"its weights alone need 21.5 GiB a GPU split over 2 \(with its overhead\), "
                                          r"more than any GPU here offers \(9.0\): serve it on more or larger GPUs"):
        placement.plan([server("big", 39.0 + OVERHEAD_GIB, heads=2)], placement.parse_gpus_option("10,10"))


def fake_nvidia_smi(tmp_path, monkeypatch, body: str) -> None:
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "nvidia-smi").write_text(f"#!/bin/sh\n{body}\n")
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")


def test_a_hung_nvidia_smi_is_one_line_naming_gpus(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "exec sleep 30")  # exec: the timeout's kill reaches the sleeper
    monkeypatch.setattr(placement, "SMI_TIMEOUT_S", 0.3)
    with pytest.raises(ConfigError, match=r"^nvidia-smi: no answer in 0.3 s; say what to plan for instead, e.g. "
                                          r"--gpus 1x141"):
        placement.query_gpus()


def test_cuda_visible_devices_read_as_cuda_reads_it(tmp_path, monkeypatch, capsys, caplog):
    import logging

    from benchfill.cli import main

    eight = placement.parse_gpus_option("8x80")
    for want, seen in [("2,5", [2, 5]), ("", []), ("-1", []), (" ", []), ("0,-1,3", [0]), ("3,9,4", [3]),
                       ("GPU-8f6e1c3a-0000-4e1b-9c3e-1d2f3a4b5c6d", list(range(8)))]:
        with caplog.at_level(logging.WARNING, logger="benchfill"):
            assert [g.index for g in placement.visible(eight, {"CUDA_VISIBLE_DEVICES": want})] == seen, want
        uuid = [r.getMessage() for r in caplog.records if "by UUID" in r.getMessage()]
        assert len(uuid) == want.startswith("GPU-"), want  # a plan over every GPU, said where it may be wrong
        caplog.clear()
    # every GPU hidden: nothing to plan for, in one line, never a plan on hidden GPUs
    fake_nvidia_smi(tmp_path, monkeypatch, "printf '0, NVIDIA H100 80GB HBM3, 81559, 0\\n'")
    cfg = _panel(tmp_path, ("a", "http://127.0.0.1:8001/v1", "org/m", None))
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert main(["probes", "serve", "--config", str(cfg)]) == 2
        cap = capsys.readouterr()
        assert cap.out == "" and cap.err == ("benchfill: error: no GPU to plan for (CUDA_VISIBLE_DEVICES hides "
                                             "them all?)\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert main(["probes", "serve", "--config", str(cfg)]) == 0 and "CUDA_VISIBLE_DEVICES=0 " in capsys.readouterr().out


def test_serve_names_the_config_with_the_probe_it_cannot_size(tmp_path, monkeypatch, capsys):
    from benchfill.cli import main

    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    cfg = tmp_path / "p.toml"
    cfg.write_text('[[probes]]\nname = "nocfg"\nbase_url = "http://127.0.0.1:8002/v1"\nmodel = "org/unknown"\n')
    assert main(["probes", "serve", "--config", str(cfg), "--gpus", "1x80"]) == 2
    assert capsys.readouterr().err.startswith(f"benchfill: error: {cfg}: probes.nocfg.gpu_memory_gb: org/unknown "
                                              "has no config.json")


def test_deepseek_mixture_of_experts_and_latent_attention_are_sized_as_published():
    # n_routed_experts was not read: DeepSeek-V2-Lite came out at 2.69B parameters, not 15.7B, and was
    # planned onto a GPU it cannot load on. Dimensions from the models' published config.json files.
    lite = {"hidden_size": 2048, "num_hidden_layers": 27, "vocab_size": 102400, "num_attention_heads": 16,
            "num_key_value_heads": 16, "intermediate_size": 10944, "moe_intermediate_size": 1408,
            "n_routed_experts": 64, "n_shared_experts": 2, "first_k_dense_replace": 1, "kv_lora_rank": 512,
            "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    v3 = {**lite, "hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 129280, "num_attention_heads": 128,
          "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
          "n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536}
    assert placement.param_count(lite) / 1e9 == pytest.approx(15.7, rel=0.02)
    assert placement.param_count(v3) / 1e9 == pytest.approx(671, rel=0.02)
    # the cache holds one latent per layer and token: 27 x (512 + 64) x 2 bytes
    assert placement.kv_bytes_per_token(lite) == 27 * (512 + 64) * 2
    mixtral = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "num_local_experts": 8}
    assert placement.param_count(mixtral) / 1e9 == pytest.approx(46.7, rel=0.02)


def test_tensor_parallelism_respects_the_kv_heads_and_their_copies():
    # 40 heads, 10 KV heads (Phi-3-medium): tp 4 divides neither way, and vLLM refuses it at load
    phi = placement.Server("phi", ["phi"], 8000, None, 16, 1024, 26.0, 30.0, "config.json", heads=40, kv_heads=10)
    assert [t for t in (1, 2, 4, 8) if phi.tp_fits(t)] == [1, 2]
    with pytest.raises(ConfigError, match="does not fit"):  # it needs 4 GPUs of 24 GiB: planned at tp 4 before
        placement.plan([phi], placement.parse_gpus_option("4x24"))
    assert placement.plan([phi], placement.parse_gpus_option("4x40")).placements[0].tp == 2
    # 16 heads, 2 KV heads (Qwen2.5-3B): tp 4 copies each KV head to two GPUs, each holding half the cache
    qwen = placement.Server("q", ["q"], 8000, None, 16, 1024, 5.7, 140.8, "config.json", heads=16, kv_heads=2)
    assert qwen.tp_fits(4) and qwen.per_gpu_gib(4) == pytest.approx(5.7 / 4 + 140.8 / 2 + OVERHEAD_GIB)
    assert qwen.per_gpu_gib(2) == pytest.approx(5.7 / 2 + 140.8 / 2 + OVERHEAD_GIB)
    with pytest.raises(ConfigError, match="does not fit"):  # planned at tp 4 as 38.6 GiB a GPU before
        placement.plan([qwen], placement.parse_gpus_option("4x48"))
