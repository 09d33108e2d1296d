"""Where each probe model's vLLM server goes: which GPUs, what share of their memory, how much context.

The plan is made before anything starts, from the GPUs (``nvidia-smi --query-gpu`` or ``--gpus``) and
each served model's memory: its weights from the parameter count and dtype in its ``config.json`` where
that is in the local Hugging Face cache (else the probe's ``gpu_memory_gb``), plus KV-cache room for
``trials`` samples at the full context, plus a fixed per-server overhead. Servers are packed several to
a GPU with ``--gpu-memory-utilization`` shares that sum to at most 0.9 there (vLLM's own default for one
server), and a model that fits no single GPU is split with ``--tensor-parallel-size``.
Shares are kept in thousandths (integers), so "the shares on a GPU never exceed 0.9" holds exactly.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from benchfill.config import Config
from benchfill.errors import ConfigError

GIB = 1024**3
MAX_SHARE_M = 900  # thousandths of a GPU the servers on it may claim together (vLLM's default is 0.9)
OVERHEAD_GIB = 2.0  # per server and GPU: CUDA context (~0.5 GiB), activation peak and CUDA graphs
SMI_TIMEOUT_S = 30.0  # nvidia-smi answers in about a second; a wedged driver makes it hang
QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits"]


# -- GPUs ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    total_gib: float
    used_gib: float = 0.0  # memory other processes already hold; vLLM checks free memory at start-up

    @property
    def cap_m(self) -> int:
        """Thousandths of this GPU the planned servers may claim together."""
        return max(0, MAX_SHARE_M - math.ceil(1000 * self.used_gib / self.total_gib))


def parse_nvidia_smi(text: str, source: str = "nvidia-smi") -> list[Gpu]:
    """GPUs from ``nvidia-smi --query-gpu=index,name,memory.total[,memory.used] --format=csv,noheader,nounits``."""
    gpus = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        try:
            index, name, total = int(cells[0]), cells[1], float(cells[2].removesuffix(" MiB"))
            used = float(cells[3].removesuffix(" MiB")) if len(cells) > 3 else 0.0
        except (IndexError, ValueError):
            raise ConfigError(f"{source}:{n}: expected 'index, name, memory.total MiB[, memory.used MiB]', "
                              f"got {line.strip()[:80]!r}") from None
        gpus.append(Gpu(index, name, total / 1024, used / 1024))
    if not gpus:
        raise ConfigError(f"{source}: lists no GPU")
    return gpus


def query_gpus() -> list[Gpu]:
    """The GPUs of this machine, as ``nvidia-smi`` counts them."""
    try:
        out = subprocess.run(QUERY, capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except FileNotFoundError:
        raise ConfigError("nvidia-smi: not found; on a machine without it say what to plan for, "
                          "e.g. --gpus 1x141 (count x GiB)") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"nvidia-smi: no answer in {SMI_TIMEOUT_S:g} s; say what to plan for instead, e.g. "
                          "--gpus 1x141 (count x GiB)") from None
    if out.returncode != 0:
        raise ConfigError(f"nvidia-smi failed ({out.returncode}): {(out.stderr or out.stdout).strip()[:160]}")
    return parse_nvidia_smi(out.stdout)


def parse_gpus_option(spec: str) -> list[Gpu]:
    """``--gpus``: ``8x80`` (count x GiB), ``141`` (one GPU) or ``80,80,24`` (one size per GPU)."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+(?:\.\d+)?)\s*", spec)
    try:
        sizes = [float(m[2])] * int(m[1]) if m else [float(s) for s in spec.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(not 0 < s < float("inf") for s in sizes):  # nan and inf are no GPU sizes
        raise ConfigError(f"--gpus {spec!r}: expected COUNTxGiB (8x80), GiB (141) or GiB,GiB,... (80,80,24)")
    return [Gpu(i, "--gpus", s) for i, s in enumerate(sizes)]


def visible(gpus: list[Gpu], env: Mapping[str, str] = os.environ) -> list[Gpu]:
    """Only the GPUs an already-set CUDA_VISIBLE_DEVICES allows, read as CUDA reads it: empty or "-1" hides
    them all, and an entry that names no GPU hides it and every one after it. UUIDs (GPU-..., MIG-...)
    are not resolved: then every GPU is planned for, with a warning."""
    want = env.get("CUDA_VISIBLE_DEVICES")
    if want is None:
        return gpus
    cells = [c.strip() for c in want.split(",")]
    if any(c.upper().startswith(("GPU-", "MIG-")) for c in cells):
        # said, not left to be found: a scheduler that sets UUIDs gave this job some GPUs, and the plan may
        # place servers on another job's
        import logging

        logging.getLogger("benchfill.placement").warning(
            "CUDA_VISIBLE_DEVICES names GPUs by UUID, which the plan does not resolve: it plans over every GPU "
            "nvidia-smi lists; give the GPUs this job may use with --gpus, or set CUDA_VISIBLE_DEVICES by index")
        return gpus
    by_index = {g.index: g for g in gpus}
    keep: list[Gpu] = []
    for c in cells:
        if not c.isdigit() or int(c) not in by_index or by_index[int(c)] in keep:
            break
        keep.append(by_index[int(c)])
    return sorted(keep, key=lambda g: g.index)


# -- a model's memory ---------------------------------------------------------------------------------
def hf_hub_dir(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "huggingface" / "hub"
    try:
        return Path.home() / ".cache" / "huggingface" / "hub"
    except (RuntimeError, KeyError):  # no HOME and no passwd entry: nowhere a cache could be
        return Path("/nonexistent/.cache/huggingface/hub")


def model_dir(model: str, env: Mapping[str, str] = os.environ) -> Path | None:
    """The cached snapshot (or local folder) holding the model's config.json, if any."""
    if (Path(model) / "config.json").is_file():
        return Path(model)
    repo = hf_hub_dir(env) / ("models--" + model.replace("/", "--"))
    ref = repo / "refs" / "main"
    if ref.is_file() and (repo / "snapshots" / ref.read_text().strip() / "config.json").is_file():
        return repo / "snapshots" / ref.read_text().strip()
    snaps = [d for d in (repo / "snapshots").glob("*") if (d / "config.json").is_file()]
    return max(snaps, key=lambda d: d.stat().st_mtime) if snaps else None


def param_count(cfg: dict) -> int:
    """Parameters of a decoder-only transformer from its config.json (dense or mixture-of-experts)."""
    c = {**cfg, **cfg.get("text_config", {})}  # multimodal configs keep the language model apart
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads") or heads
    hd = c.get("head_dim") or h // heads
    if c.get("kv_lora_rank"):  # multi-head latent attention (DeepSeek-V2/V3): low-rank q and kv projections
        nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        q_rank = c.get("q_lora_rank")
        attn = (h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope))
        attn += h * (c["kv_lora_rank"] + rope) + c["kv_lora_rank"] * heads * (nope + v) + heads * v * h
    else:
        attn = 2 * h * heads * hd + 2 * h * kv_heads * hd
        if c.get("attention_bias") or c.get("model_type") == "qwen2":  # Qwen2 carries q/k/v biases
            attn += heads * hd + 2 * kv_heads * hd
    # Mixture of experts: Mixtral's num_local_experts, Qwen-MoE's num_experts, DeepSeek's n_routed_experts
    # (with n_shared_experts always on, and its first first_k_dense_replace layers dense)
    experts = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts") or 1
    dense = 3 * h * c["intermediate_size"]  # gate, up, down
    if experts > 1:
        inter = c.get("moe_intermediate_size") or c["intermediate_size"]
        shared = (c.get("n_shared_experts") or 0) * 3 * h * inter
        if c.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert and its gate
            shared += 3 * h * c["shared_expert_intermediate_size"] + h
        n_dense = min(c.get("first_k_dense_replace") or 0, layers)
        mlp_all = n_dense * dense + (layers - n_dense) * (experts * 3 * h * inter + h * experts + shared)
    else:
        mlp_all = layers * dense
    embed = vocab * h * (1 if c.get("tie_word_embeddings", cfg.get("tie_word_embeddings")) else 2)
    return layers * (attn + 2 * h) + mlp_all + embed + h


def bytes_per_param(cfg: dict) -> float:
    q = cfg.get("quantization_config") or {}
    if q.get("bits"):
        return q["bits"] / 8
    if "fp8" in str(q.get("quant_method", "")).lower():
        return 1.0
    # vLLM's dtype "auto" serves float32 checkpoints in 16 bits, so every unquantized model takes 2.
    return 2.0


def kv_bytes_per_token(cfg: dict) -> int:
    """Keys and values of every layer for one token, in the default 16-bit KV cache. Under multi-head
    latent attention vLLM caches one compressed latent per layer (kv_lora_rank + qk_rope_head_dim)."""
    c = {**cfg, **cfg.get("text_config", {})}
    if c.get("kv_lora_rank"):
        return c["num_hidden_layers"] * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2
    heads = c["num_attention_heads"]
    hd = c.get("head_dim") or c["hidden_size"] // heads
    return 2 * c["num_hidden_layers"] * kv_heads_of(c) * hd * 2


def kv_heads_of(cfg: dict) -> int:
    c = {**cfg, **cfg.get("text_config", {})}
    return c.get("num_key_value_heads") or c["num_attention_heads"]


@dataclass
class Server:
    """One vLLM server: a served model, the probes that use it, and what it needs."""

    model: str
    probes: list[str]
    port: int
    key_env: str | None
    max_num_seqs: int
    max_model_len: int
    weights_gib: float
    kv_gib: float
    source: str  # where the estimate came from
    heads: int | None = None  # tensor parallelism must divide the attention heads
    kv_heads: int | None = None  # ... and divide the KV heads, or be a multiple of them (each then copied)
    generation: dict = field(default_factory=dict)  # temperature / top_p of generation_config.json
    host: str = "127.0.0.1"  # the address the server listens on: its probes' URL host (loopback by default)

    def per_gpu_gib(self, tp: int) -> float:
        # With more GPUs than KV heads, vLLM copies the KV heads: each GPU holds 1/kv_heads of the cache
        return self.weights_gib / tp + self.kv_gib / min(tp, self.kv_heads or tp) + OVERHEAD_GIB

    def tp_fits(self, tp: int) -> bool:
        """A tensor-parallel size vLLM accepts for this model: dividing its attention heads, and its KV heads
        dividing by it or dividing it."""
        if tp == 1:
            return True
        if self.heads and self.heads % tp:
            return False
        return not self.kv_heads or self.kv_heads % tp == 0 or tp % self.kv_heads == 0


def servers(cfg: Config, env: Mapping[str, str] = os.environ) -> list[Server]:
    """One server per served model, on the port its probe's URL names, sized."""
    by_model: dict[str, list] = {}
    for p in cfg.probes:
        if p.replicas is not None:  # one server per model here; a fleet's replicas run on their own hosts
            raise ConfigError(f"probes.{p.name}.replicas: probes serve plans one server per model; start each "
                              "replica of a fleet on its own host (docs/fleets.md)")
        if urlsplit(p.base_url).scheme != "http":
            # vLLM serves plain HTTP here: a client asking https:// of it would fail every call while the
            # readiness checks, which ask http://, pass
            raise ConfigError(f"probes.{p.name}.base_url: {p.base_url}: probes serve starts plain-HTTP servers; "
                              "give an http:// URL (TLS belongs to a proxy in front, served separately)")
        by_model.setdefault(p.model, []).append(p)
    ports, hosts = {}, {}
    for model, probes in by_model.items():
        parts = urlsplit(probes[0].base_url)
        if not parts.port:  # the client would knock on port 80 (or 443) while the server listens elsewhere
            raise ConfigError(f"probes.{probes[0].name}.base_url: {probes[0].base_url} names no port; give the "
                              "port its vllm server listens on (e.g. http://127.0.0.1:8001/v1)")
        for other in probes[1:]:  # one server per model: its probes must all reach it the same way
            o = urlsplit(other.base_url)
            if (o.hostname, o.port, other.api_key_env) != (parts.hostname, parts.port, probes[0].api_key_env):
                raise ConfigError(f"probes.{other.name}: serves {model} as probes.{probes[0].name} does, but at "
                                  f"{other.base_url} with key {other.api_key_env} against {probes[0].base_url} with "
                                  f"key {probes[0].api_key_env}; one server per model: give both the same")
        ports[model] = parts.port
        # A URL naming another address of this machine (a LAN address, for an orchestrator elsewhere): the
        # server listens there, or the orchestrator could not reach it.
        hosts[model] = "127.0.0.1" if parts.hostname in (None, "localhost", "127.0.0.1") else parts.hostname
    for port in sorted(set(ports.values())):
        sharing = [m for m in by_model if ports[m] == port]
        if len(sharing) > 1:
            named = " and ".join(f"{m} (probes {', '.join(p.name for p in by_model[m])})" for m in sharing)
            raise ConfigError(f"probes: {named} are served by separate servers but share port {port}; give "
                              "each served model its own base_url port")
    out = []
    for model, probes in by_model.items():
        trials = max(p.trials for p in probes)
        mml = max(p.max_prompt_tokens + p.max_tokens for p in probes)
        seqs = max(max(p.concurrency * p.trials for p in probes), 16)
        server = _sized(model, [p.name for p in probes], ports[model], probes[0].api_key_env, seqs, mml, trials,
                        max((p.gpu_memory_gb for p in probes if p.gpu_memory_gb is not None), default=None), env)
        server.host = hosts[model]
        out.append(server)
    return out


def _sized(model, probes, port, key_env, seqs, mml, trials, gpu_memory_gb, env) -> Server:
    where = model_dir(model, env)
    if where is None:
        if gpu_memory_gb is None:
            raise ConfigError(f"probes.{probes[0]}.gpu_memory_gb: {model} has no config.json in the Hugging Face "
                              f"cache ({hf_hub_dir(env)}); fetch it (hf download {model} config.json generation_config.json) "
                              "or give the GiB its server needs")
        return Server(model, probes, port, key_env, seqs, mml, max(gpu_memory_gb - OVERHEAD_GIB, 0.0), 0.0,
                      "gpu_memory_gb")
    try:
        cfg = json.loads((where / "config.json").read_text())
        weights = _weights_bytes(where, cfg)
        kv = trials * mml * kv_bytes_per_token(cfg)
        c = {**cfg, **cfg.get("text_config", {})}
        heads = c["num_attention_heads"]
        # (MLA's one latent per layer is copied to every GPU, as a single KV head would be)
        kv_heads = 1 if c.get("kv_lora_rank") else kv_heads_of(c)
    except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        raise ConfigError(f"{where / 'config.json'}: cannot size {model} from it ({exc.__class__.__name__}: "
                          f"{str(exc)[:80]}); set probes.{probes[0]}.gpu_memory_gb") from None
    limit = cfg.get("max_position_embeddings") or cfg.get("text_config", {}).get("max_position_embeddings")
    if limit and mml > limit:
        raise ConfigError(f"probes.{probes[0]}: max_prompt_tokens + max_tokens = {mml} exceeds {model}'s "
                          f"context of {limit} tokens (max_position_embeddings in its config.json)")
    gen = {}
    if (where / "generation_config.json").is_file():
        try:
            gen = {k: v for k, v in json.loads((where / "generation_config.json").read_text()).items()
                   if k in ("temperature", "top_p") and isinstance(v, int | float)}
        except ValueError:
            gen = {}
    return Server(model, probes, port, key_env, seqs, mml, weights / GIB, kv / GIB, "config.json", heads, kv_heads,
                  gen)


def _weights_bytes(where: Path, cfg: dict) -> float:
    index = where / "model.safetensors.index.json"  # the exact size of the weights, where downloaded
    if index.is_file():
        total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
        if total:
            return float(total) * (2 / 4 if cfg.get("torch_dtype", cfg.get("dtype")) == "float32" else 1)
    return param_count(cfg) * bytes_per_param(cfg)


# -- the plan -----------------------------------------------------------------------------------------
@dataclass
class Placement:
    server: Server
    gpus: tuple[int, ...]  # physical indices, as nvidia-smi numbers them
    need_m: int  # thousandths of each of its GPUs the server needs at least
    share_m: int  # thousandths it gets: its need plus its part of the room left over

    @property
    def share(self) -> float:
        return self.share_m / 1000

    @property
    def tp(self) -> int:
        return len(self.gpus)


@dataclass
class Plan:
    gpus: list[Gpu]
    placements: list[Placement]

    def on_gpu(self, index: int) -> list[Placement]:
        return [p for p in self.placements if index in p.gpus]

    def waves(self) -> list[list[Placement]]:
        """Servers that share a GPU start one after another (each counts the other's loading as its own
        memory when they start together, vllm issue #55827); servers on separate GPUs start together."""
        depth: dict[int, int] = {}
        waves: list[list[Placement]] = []
        for p in self.placements:
            w = max(depth.get(g, 0) for g in p.gpus)
            for g in p.gpus:
                depth[g] = w + 1
            if w == len(waves):
                waves.append([])
            waves[w].append(p)
        return waves

    def table(self) -> str:
        rows = [("model", "GPUs", "TP", "needs", "share", "GiB/GPU", "weights", "KV", "max-len", "port", "sized from")]
        for p in self.placements:
            s, g = p.server, self._gpu(p.gpus[0])
            rows.append((s.model, ",".join(map(str, p.gpus)), str(p.tp), f"{s.per_gpu_gib(p.tp):.1f}", f"{p.share:.3f}",
                         f"{p.share * g.total_gib:.1f}", *((f"{s.weights_gib:.1f}", f"{s.kv_gib:.1f}")
                                                            if s.source == "config.json" else ("-", "-")),
                         str(s.max_model_len), str(s.port), s.source))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        for g in self.gpus:
            used = sum(p.share_m for p in self.on_gpu(g.index))
            lines.append(f"GPU {g.index} ({g.name}, {g.total_gib:.1f} GiB, {g.used_gib:.1f} in use): "
                         f"shares {used / 1000:.3f} of {g.cap_m / 1000:.3f}")
        return "\n".join(lines)

    def _gpu(self, index: int) -> Gpu:
        return next(g for g in self.gpus if g.index == index)


def plan(servers_: list[Server], gpus: list[Gpu]) -> Plan:
    """Largest server first, each onto the GPU(s) with the most room (spreading the servers gives each more
    KV cache and compute); if that leaves a server out, again onto the GPU(s) with the least room that
    still fits (best fit packs tighter). A server that fits no single GPU takes the smallest
    tensor-parallel size vLLM accepts for it (``Server.tp_fits``) that fits.
    A panel that fits neither way is refused with one line saying by how much.
    """
    if not gpus:
        raise ConfigError("no GPU to plan for (CUDA_VISIBLE_DEVICES hides them all?)")
    try:
        return _place(servers_, gpus, spread=True)
    except ConfigError:
        return _place(servers_, gpus, spread=False)


def _place(servers_: list[Server], gpus: list[Gpu], spread: bool) -> Plan:
    room = {g.index: g.cap_m for g in gpus}
    total = {g.index: g.total_gib for g in gpus}
    order = sorted(range(len(servers_)), key=lambda i: -servers_[i].per_gpu_gib(1))
    placed: dict[int, Placement] = {}
    for i in order:
        s = servers_[i]
        tps = [t for t in (1, 2, 4, 8, 16) if t <= len(gpus) and s.tp_fits(t)]
        for tp in tps:
            need = {g: math.ceil(1000 * s.per_gpu_gib(tp) / total[g]) for g in room}
            chosen, need_m = _fit(room, need, tp, spread)
            if chosen:
                for g in chosen:
                    room[g] -= need_m
                placed[i] = Placement(s, chosen, need_m, need_m)
                break
        else:  # said at the split it came nearest with (the largest tried had named 2.7 GiB a GPU for a 3.5 GiB model)
            near = min(tps, key=lambda t: s.per_gpu_gib(t) - _most_room(t, gpus, room))
            raise ConfigError(_refusal(s, near, gpus, room, len(servers_) - len(placed), servers_, tps[-1]))
    # The room left on each GPU goes to its servers in proportion to their needs: more KV cache. A split
    # server takes one share on all its GPUs (the least of its parts); single-GPU servers then share
    # whatever that leaves.
    split = [p for p in placed.values() if p.tp > 1]
    for p in split:
        p.share_m += min(room[g] * p.need_m // sum(q.need_m for q in placed.values() if g in q.gpus)
                         for g in p.gpus)
    for p in split:
        for g in p.gpus:
            room[g] -= p.share_m - p.need_m
    single = [p for p in placed.values() if p.tp == 1]
    for p in single:
        g = p.gpus[0]
        p.share_m += room[g] * p.need_m // sum(q.need_m for q in single if q.gpus[0] == g)
    return Plan(gpus, [placed[i] for i in range(len(servers_))])


def _fit(room: dict[int, int], need: dict[int, int], tp: int, spread: bool) -> tuple[tuple[int, ...], int]:
    """tp GPUs that fit, all at one share (vLLM takes one value): the roomiest, or the tightest fits."""
    sign = -1 if spread else 1
    if tp == 1:
        fits = sorted((sign * (room[g] - need[g]), g) for g in room if need[g] <= room[g])
        return ((fits[0][1],), need[fits[0][1]]) if fits else ((), 0)
    for level in sorted(set(need.values())):  # on GPUs of different sizes the smallest GPU sets the share
        fits = sorted((sign * (room[g] - level), g) for g in room if need[g] <= level <= room[g])
        if len(fits) >= tp:
            return tuple(sorted(g for _, g in fits[:tp])), level
    return (), 0


def _most_room(tp: int, gpus: list[Gpu], room: dict[int, int]) -> float:
    """The room (GiB) on the tp-th roomiest GPU: what a server split over tp GPUs could have on each."""
    best = sorted(gpus, key=lambda g: -room[g.index] * g.total_gib)[:tp]
    return min(room[g.index] * g.total_gib / 1000 for g in best)


def _refusal(s: Server, tp: int, gpus: list[Gpu], room: dict[int, int], left: int, servers_: list[Server],
             widest: int | None = None) -> str:
    have = _most_room(tp, gpus, room)
    need = s.per_gpu_gib(tp)
    where = f"on each of {tp} GPUs" if tp > 1 else "on one GPU"
    more = f"; {left - 1} more server(s) not yet placed" if left > 1 else ""
    # The first server refused is short by its own need only; the panel's shortfall counts every server
    # at its least (one GPU, one overhead) against the caps of all GPUs, packing aside.
    panel = sum(x.per_gpu_gib(1) for x in servers_)
    cap = sum(g.cap_m * g.total_gib / 1000 for g in gpus)
    total = (f"in all the panel needs {panel:.1f} GiB, the GPUs offer {cap:.1f}, short by {panel - cap:.1f} GiB"
             if panel > cap else f"in all the panel needs {panel:.1f} GiB of the {cap:.1f} the GPUs offer, but "
             "not in pieces its servers fit in")
    short = need - have
    short_said = f"{short:.1f}" if short >= 0.05 else f"{short:.2f}" if short >= 0.005 else "under 0.01"
    # weights that no GPU holds even split as widely as these GPUs allow: fewer samples or tokens cannot help
    widest = widest or tp
    biggest = max(g.cap_m * g.total_gib / 1000 for g in gpus)
    weights = s.weights_gib / widest + OVERHEAD_GIB
    remedy = (f"its weights alone need {weights:.1f} GiB a GPU split over {widest} (with its overhead), more than "
              f"any GPU here offers ({biggest:.1f}): serve it on more or larger GPUs, or drop the probe"
              if weights > biggest else "lower trials, max_tokens or max_prompt_tokens, drop a probe, or add GPUs")
    return (f"the panel does not fit: {s.model} (probes {', '.join(s.probes)}) needs {need:.1f} GiB {where}, "
            f"the most room left is {have:.1f} GiB, short by {short_said} GiB{more}; {total}; {remedy}")


def sampling_warnings(cfg: Config, servers_: list[Server]) -> list[str]:
    """Where the panel's temperature / top_p differ from the model's generation_config.json."""
    gen = {s.model: s.generation for s in servers_}
    out = []
    for p in cfg.probes:
        for key in ("temperature", "top_p"):
            rec = gen.get(p.model, {}).get(key)
            if rec is not None and abs(rec - getattr(p, key)) > 1e-9:
                out.append(f"probes.{p.name}.{key} = {getattr(p, key)} differs from {rec} in {p.model}'s "
                           "generation_config.json; the panel's value is used (docs/serving.md)")
    return out
