#!/usr/bin/env python3
"""Hugging Face transformers baseline for the ALBERT benchmarks (training, inference, largest batch).

    .venv-torch/bin/python benches/hf_baseline.py train --config tiny --batch 32 --seq 128 \\
        --masked 20 --steps 10 --runs 5 --threads 2 --device cpu --dtype fp32
    .venv-torch/bin/python benches/hf_baseline.py infer --config tiny --batch 64 --seq 64 --threads 2 --runs 5
    python3 benches/hf_baseline.py maxbatch --config base --seq 128 --device cuda --dtype bf16

(`scripts/setup-python.sh` makes .venv-torch; on the GPU machine the system python3 has torch
and transformers.) Each measurement is one JSON line on stdout; a human summary goes to stderr.

--config: `tiny`, `small`, `base`, `large`, `xlarge`, `xxlarge` (or any albert_zh config name
such as `tiny_google`) are read from the albert_zh JSON files in
../shared/datasets/albert_zh_configs (beside the repo; or $ALBERT_ZH_CONFIGS); a path to such a
JSON file (or to a transformers config.json) is read as is, so a GPU run can use files copied into
the repo. When the shared folder is absent the dimensions of tiny/small/base/large/xlarge are
built in. albert_zh keys map one to one onto transformers' AlbertConfig (hidden_size,
embedding_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size,
max_position_embeddings, type_vocab_size, hidden_act, dropouts), with num_hidden_groups = 1 and
inner_group_num = 1 (ALBERT's full sharing); `ln_type` "preln" has no transformers equivalent:
the model is then run post-LN, which costs the same, and the JSON line says so.

train: AlbertForPreTraining training steps: AdamW (lr 1e-4, weight decay 0.01, torch's default
implementation: foreach on CUDA), sdpa attention, dropout as the config says (albert_zh tiny, base
and large: 0). Each step: zero_grad, forward with `labels` (-100 except `masked` random distinct
positions per row, position 0 excluded, random token ids there) and `sentence_order_label`
(random 0/1), backward, optimizer step. Inputs: random ids in [5, V), token type 0 for the first
half and 1 for the second, no padding. One untimed warm-up run of `--warmup` steps (which also
compiles with --compile), then `--runs` timed runs of `--steps` steps each (CUDA synchronised);
s/step = median over runs of (run time / steps); tokens/s = batch * seq / s_per_step.
`--dtype bf16` = torch.autocast(bfloat16) with fp32 master weights and fp32 AdamW states
(the usual mixed precision; fp16 is not offered).

Model FLOPs per training step (what MFU counts; matmuls only, 2 FLOPs per multiply-add,
backward = 2 x forward, so 6 per parameter per token; biases, LayerNorm, softmax, activations,
embedding lookups and the optimizer are not counted):

    F = 6 * T * N_eff  +  6 * B * M * (H*E + E*V)  +  6 * B * (H*H + 2*H)  +  12 * B * L * H * S^2
    N_eff = E*H + L * (4*H*H + 2*H*I)        (the E->H projection and L applications of the
                                              encoder layer: a shared layer counts L times)

with B batch, S seq, T = B*S tokens, M masked positions per row, L layers, H hidden,
E embedding, I intermediate, V vocab. Terms: encoder (6*T*N_eff); MLM head (dense H->E and the
decoder E->V tied to the embeddings) on the M masked positions only; pooler + SOP head once
per sequence; attention scores and weighted sum (2*2*S*S*H forward per layer and sequence, x3
with backward). transformers computes the MLM head at all S positions; those extra FLOPs are
not model FLOPs (the Rust model gathers the masked positions first), so MFU compares
implementations on the same work: MFU = F / s_per_step / (peak_tflops * 1e12). The JSON line
also gives `hf_executed_flops_per_step` (head at every position) and the HFU from it.
`--peak-tflops` defaults to 989 (H100 SXM dense bf16; the H200 is the same GH100 compute die,
so the same peak); ../shared/docs/GPU.md measured ~790 TFLOP/s for bf16 matmuls there: pass
--peak-tflops 790 for MFU against the measured peak. On CPU only the achieved TFLOP/s are given.

infer: AlbertModel forward (with pooler) under torch.inference_mode on a random batch with an
all-ones attention mask; sentences/s = batch / median s per batch (each run = `--steps` forwards).

maxbatch: the largest batch whose training step (as in `train`, two steps so AdamW states
exist) fits in GPU memory: doubling from 1 until the first OOM, then binary search between the
last fit and the first OOM down to `--granularity`.

Peak RSS is resource.getrusage(RUSAGE_SELF).ru_maxrss (the whole process, torch included);
CUDA peak is torch.cuda.max_memory_allocated (and reserved).
"""

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Dimensions of the albert_zh configs (brightmart/albert_zh), used when the shared folder is absent.
BUILTIN = {
    "tiny": dict(hidden_size=312, embedding_size=128, num_hidden_layers=4, num_attention_heads=12, intermediate_size=1248),
    "small": dict(hidden_size=384, embedding_size=128, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    "base": dict(hidden_size=768, embedding_size=128, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "large": dict(hidden_size=1024, embedding_size=128, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    "xlarge": dict(hidden_size=2048, embedding_size=128, num_hidden_layers=24, num_attention_heads=32, intermediate_size=8192),
}
BUILTIN_COMMON = dict(
    vocab_size=21128,
    max_position_embeddings=512,
    type_vocab_size=2,
    hidden_act="gelu",
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    ln_type="postln",
)
ALIASES = {"small": "small_google"}

MAPPED_KEYS = (
    "hidden_size",
    "embedding_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "type_vocab_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "initializer_range",
    "layer_norm_eps",
)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def config_dirs():
    dirs = []
    if os.environ.get("ALBERT_ZH_CONFIGS"):
        dirs.append(os.environ["ALBERT_ZH_CONFIGS"])
    dirs.append(os.path.join(ROOT, "..", "shared", "datasets", "albert_zh_configs"))
    dirs.append(os.path.join(ROOT, "shared", "datasets", "albert_zh_configs"))
    return dirs


def portable(path):
    """`path` relative to the repository root: benchmark lines are committed to results/, which
    must not carry the measuring machine's absolute paths."""
    return os.path.relpath(os.path.abspath(path), ROOT)


def load_albert_zh(spec):
    """Returns (name, source, dict of albert_zh keys)."""
    if os.path.isfile(spec):
        with open(spec) as f:
            return os.path.splitext(os.path.basename(spec))[0], portable(spec), json.load(f)
    if os.sep in spec or spec.endswith(".json"):
        sys.exit(f"hf_baseline: config file {spec!r} not found")
    name = ALIASES.get(spec, spec)
    for d in config_dirs():
        p = os.path.join(d, f"albert_config_{name}.json")
        if os.path.isfile(p):
            with open(p) as f:
                return spec, portable(p), json.load(f)
    if spec in BUILTIN:
        return spec, "builtin", {**BUILTIN_COMMON, **BUILTIN[spec]}
    sys.exit(
        f"hf_baseline: unknown config {spec!r}: not a file, no albert_config_{name}.json in "
        f"{config_dirs()}, and not one of the built-in {sorted(BUILTIN)}"
    )


def make_config(spec, attn="sdpa"):
    from transformers import AlbertConfig

    name, source, raw = load_albert_zh(spec)
    kw = {k: raw[k] for k in MAPPED_KEYS if raw.get(k) is not None}
    missing = [k for k in MAPPED_KEYS[:8] if k not in kw]
    if missing:
        sys.exit(f"hf_baseline: config {source} lacks {missing}")
    if kw["hidden_size"] % kw["num_attention_heads"]:
        sys.exit(f"hf_baseline: hidden_size {kw['hidden_size']} not divisible by heads {kw['num_attention_heads']}")
    notes = []
    ln = raw.get("ln_type") or "postln"
    if ln != "postln":
        notes.append(f"ln_type {ln} run as post-LN (transformers has no pre-LN ALBERT; same cost)")
    groups = raw.get("num_hidden_groups", 1)
    inner = raw.get("inner_group_num", 1)
    cfg = AlbertConfig(
        **kw,
        num_hidden_groups=groups,
        inner_group_num=inner,
        classifier_dropout_prob=raw.get("classifier_dropout_prob", 0.0) or 0.0,
        attn_implementation=attn,
    )
    return name, source, cfg, notes


def dims(cfg):
    return dict(
        V=cfg.vocab_size,
        E=cfg.embedding_size,
        H=cfg.hidden_size,
        L=cfg.num_hidden_layers,
        heads=cfg.num_attention_heads,
        I=cfg.intermediate_size,
        act=cfg.hidden_act,
        groups=cfg.num_hidden_groups,
    )


def train_flops(cfg, B, S, M):
    """Model FLOPs per training step (see the module docstring) and the FLOPs transformers
    executes (MLM head at every position)."""
    V, E, H, L, I = cfg.vocab_size, cfg.embedding_size, cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size
    T = B * S
    n_eff = E * H + L * (4 * H * H + 2 * H * I)
    encoder = 6 * T * n_eff
    head_per_pos = 6 * (H * E + E * V)
    pool = 6 * B * (H * H + 2 * H)
    attn = 12 * B * L * H * S * S
    model = encoder + B * M * head_per_pos + pool + attn
    executed = encoder + T * head_per_pos + pool + attn
    return model, executed, n_eff


def setup_torch(a):
    import torch

    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    if a.device.startswith("cuda"):
        if not torch.cuda.is_available():
            sys.exit("hf_baseline: --device cuda but torch.cuda.is_available() is False")
        torch.backends.cuda.matmul.allow_tf32 = a.dtype == "fp32" and a.tf32
        torch.backends.cudnn.allow_tf32 = a.dtype == "fp32" and a.tf32
    torch.manual_seed(a.seed)
    return torch


def sync(torch, device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def autocast(torch, a):
    import contextlib

    if a.dtype == "bf16":
        return torch.autocast(device_type="cuda" if a.device.startswith("cuda") else "cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def rss_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # ru_maxrss is KiB on Linux


def env_info(torch):
    import transformers

    info = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "host_cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def make_batch(torch, cfg, B, S, M, device, gen):
    V = cfg.vocab_size
    ids = torch.randint(5, V, (B, S), generator=gen)
    types = torch.zeros(B, S, dtype=torch.long)
    types[:, S // 2 :] = 1
    mask = torch.ones(B, S, dtype=torch.long)
    labels = torch.full((B, S), -100, dtype=torch.long)
    m = min(M, S - 1)
    if m > 0:
        # m distinct positions in 1..S-1 per row
        pos = torch.rand(B, S - 1, generator=gen).argsort(dim=1)[:, :m] + 1
        labels.scatter_(1, pos, torch.randint(5, V, (B, m), generator=gen))
    sop = torch.randint(0, 2, (B,), generator=gen)
    t = dict(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels, sentence_order_label=sop)
    return {k: v.to(device) for k, v in t.items()}


def build_train(torch, a, cfg):
    from transformers import AlbertForPreTraining

    model = AlbertForPreTraining(cfg).to(a.device)
    model.train()
    assert model.config._attn_implementation == a.attn, model.config._attn_implementation
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    fwd = torch.compile(model) if a.compile else model
    return model, opt, fwd


def train_step(torch, a, fwd, opt, batch):
    opt.zero_grad(set_to_none=True)
    with autocast(torch, a):
        out = fwd(**batch)
    out.loss.backward()
    opt.step()
    return out.loss


def cmd_train(a):
    torch = setup_torch(a)
    name, source, cfg, notes = make_config(a.config, a.attn)
    if a.seq > cfg.max_position_embeddings:
        sys.exit(f"hf_baseline: --seq {a.seq} > max_position_embeddings {cfg.max_position_embeddings}")
    model, opt, fwd = build_train(torch, a, cfg)
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(a.seed)
    batches = [make_batch(torch, cfg, a.batch, a.seq, a.masked, a.device, gen) for _ in range(min(a.steps, 4))]

    t0 = time.perf_counter()
    for i in range(a.warmup):
        loss = train_step(torch, a, fwd, opt, batches[i % len(batches)])
    sync(torch, a.device)
    warm_s = time.perf_counter() - t0
    if a.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()

    per_step = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for r in range(a.runs):
        sync(torch, a.device)
        t0 = time.perf_counter()
        for i in range(a.steps):
            loss = train_step(torch, a, fwd, opt, batches[i % len(batches)])
        sync(torch, a.device)
        dt = (time.perf_counter() - t0) / a.steps
        per_step.append(dt)
        log(f"  run {r + 1}/{a.runs}: {dt:.4f} s/step, loss {loss.item():.3f}")

    cpu_per_wall = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    s = statistics.median(per_step)
    tokens = a.batch * a.seq
    model_f, exec_f, n_eff = train_flops(cfg, a.batch, a.seq, a.masked)
    res = {
        "bench": "hf_train",
        "model": "AlbertForPreTraining",
        "config": name,
        "config_source": source,
        **dims(cfg),
        "params": n_params,
        "params_nonembedding_effective": n_eff,
        "batch": a.batch,
        "seq": a.seq,
        "masked": a.masked,
        "steps": a.steps,
        "runs": a.runs,
        "warmup_steps": a.warmup,
        "warmup_s": round(warm_s, 3),
        "threads": a.threads,
        "device": a.device,
        "dtype": a.dtype,
        "attn": a.attn,
        "compile": a.compile,
        "optimizer": "AdamW",
        "s_per_step": s,
        "cpu_seconds_per_wall_second": round(cpu_per_wall, 3),
        "s_per_step_runs": per_step,
        "tokens_per_s": tokens / s,
        "peak_rss_gb": round(rss_gb(), 3),
        "model_flops_per_step": model_f,
        "hf_executed_flops_per_step": exec_f,
        "model_tflops_per_s": model_f / s / 1e12,
        "final_loss": loss.item(),
        **env_info(torch),
    }
    if a.device.startswith("cuda"):
        res["cuda_peak_alloc_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 3)
        res["cuda_peak_reserved_gb"] = round(torch.cuda.max_memory_reserved() / 1e9, 3)
        res["peak_tflops"] = a.peak_tflops
        res["mfu"] = model_f / s / (a.peak_tflops * 1e12)
        res["hfu"] = exec_f / s / (a.peak_tflops * 1e12)
    if notes:
        res["notes"] = notes
    print(json.dumps(res), flush=True)
    extra = ""
    if "mfu" in res:
        extra = f", MFU {100 * res['mfu']:.1f}% of {a.peak_tflops:g} TFLOP/s, CUDA peak {res['cuda_peak_alloc_gb']:.2f} GB"
    log(
        f"hf train {name} B={a.batch} S={a.seq} M={a.masked} {a.device} {a.dtype}"
        f"{' compiled' if a.compile else ''} threads={a.threads}: {s:.4f} s/step (median of {a.runs} x {a.steps}), "
        f"{tokens / s:,.0f} tokens/s, {model_f / s / 1e12:.3f} model TFLOP/s, peak RSS {res['peak_rss_gb']:.2f} GB{extra}"
        f" [load avg {res['load_avg_1m']}]"
    )


def cmd_infer(a):
    torch = setup_torch(a)
    from transformers import AlbertModel

    name, source, cfg, notes = make_config(a.config, a.attn)
    if a.seq > cfg.max_position_embeddings:
        sys.exit(f"hf_baseline: --seq {a.seq} > max_position_embeddings {cfg.max_position_embeddings}")
    model = AlbertModel(cfg).to(a.device).eval()
    fwd = torch.compile(model) if a.compile else model
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(a.seed)
    b = make_batch(torch, cfg, a.batch, a.seq, 0, a.device, gen)
    inputs = {k: b[k] for k in ("input_ids", "token_type_ids", "attention_mask")}

    with torch.inference_mode():
        t0 = time.perf_counter()
        for _ in range(a.warmup):
            with autocast(torch, a):
                fwd(**inputs)
        sync(torch, a.device)
        warm_s = time.perf_counter() - t0
        per_batch = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for r in range(a.runs):
            sync(torch, a.device)
            t0 = time.perf_counter()
            for _ in range(a.steps):
                with autocast(torch, a):
                    out = fwd(**inputs)
            sync(torch, a.device)
            dt = (time.perf_counter() - t0) / a.steps
            per_batch.append(dt)
            log(f"  run {r + 1}/{a.runs}: {dt:.4f} s/batch")
    cpu_per_wall = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    s = statistics.median(per_batch)
    res = {
        "bench": "hf_infer",
        "model": "AlbertModel",
        "config": name,
        "config_source": source,
        **dims(cfg),
        "params": n_params,
        "batch": a.batch,
        "seq": a.seq,
        "steps": a.steps,
        "runs": a.runs,
        "warmup_steps": a.warmup,
        "warmup_s": round(warm_s, 3),
        "threads": a.threads,
        "device": a.device,
        "dtype": a.dtype,
        "attn": a.attn,
        "compile": a.compile,
        "s_per_batch": s,
        "cpu_seconds_per_wall_second": round(cpu_per_wall, 3),
        "s_per_batch_runs": per_batch,
        "sentences_per_s": a.batch / s,
        "tokens_per_s": a.batch * a.seq / s,
        "peak_rss_gb": round(rss_gb(), 3),
        "output_shape": list(out.last_hidden_state.shape),
        **env_info(torch),
    }
    if a.device.startswith("cuda"):
        res["cuda_peak_alloc_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 3)
    if notes:
        res["notes"] = notes
    print(json.dumps(res), flush=True)
    log(
        f"hf infer {name} B={a.batch} S={a.seq} {a.device} {a.dtype} threads={a.threads}: {s:.4f} s/batch "
        f"(median of {a.runs} x {a.steps}), {a.batch / s:,.1f} sentences/s, peak RSS {res['peak_rss_gb']:.2f} GB"
        f" [load avg {res['load_avg_1m']}]"
    )


def search_max(fits, max_batch, granularity=1):
    """Largest B <= max_batch with fits(B), assuming fits is monotone: doubling from 1 until
    the first failure, then binary search down to `granularity`. Returns (largest fit, first
    failure or None when max_batch was reached without one)."""
    good, bad = 0, None
    B = 1
    while B <= max_batch:
        if fits(B):
            good = B
            B *= 2
        else:
            bad = B
            break
    if bad is not None:
        lo, hi = good, bad
        while hi - lo > granularity:
            mid = (lo + hi) // 2
            if granularity > 1:
                mid = max(lo + granularity, mid // granularity * granularity)
                if mid >= hi:
                    break
            if fits(mid):
                lo = mid
            else:
                hi = mid
        good = lo
    return good, bad


def cmd_maxbatch(a):
    torch = setup_torch(a)
    if not a.device.startswith("cuda"):
        sys.exit("hf_baseline: maxbatch measures GPU memory: use --device cuda")
    name, source, cfg, notes = make_config(a.config, a.attn)
    if a.seq > cfg.max_position_embeddings:
        sys.exit(f"hf_baseline: --seq {a.seq} > max_position_embeddings {cfg.max_position_embeddings}")
    model, opt, fwd = build_train(torch, a, cfg)
    gen = torch.Generator().manual_seed(a.seed)
    tried = {}

    def fits(B):
        if B in tried:
            return tried[B]
        batch = None
        ok = True
        t0 = time.perf_counter()
        try:
            batch = make_batch(torch, cfg, B, a.seq, a.masked, a.device, gen)
            for _ in range(2):
                train_step(torch, a, fwd, opt, batch)
            sync(torch, a.device)
        except torch.OutOfMemoryError:
            ok = False
        finally:
            opt.zero_grad(set_to_none=True)
            del batch
            torch.cuda.empty_cache()
        tried[B] = ok
        log(f"  batch {B}: {'fits' if ok else 'OOM'} ({time.perf_counter() - t0:.1f} s)")
        return ok

    good, bad = search_max(fits, a.max_batch, a.granularity)
    res = {
        "bench": "hf_maxbatch",
        "model": "AlbertForPreTraining",
        "config": name,
        "config_source": source,
        **dims(cfg),
        "seq": a.seq,
        "masked": a.masked,
        "device": a.device,
        "dtype": a.dtype,
        "attn": a.attn,
        "compile": a.compile,
        "optimizer": "AdamW",
        "max_batch": good,
        "first_oom": bad,
        "capped_at": None if bad is not None else a.max_batch,
        "granularity": a.granularity,
        "tried": {str(k): v for k, v in sorted(tried.items())},
        "gpu_total_gb": round(torch.cuda.get_device_properties(0).total_memory / 1e9, 2),
        **env_info(torch),
    }
    if notes:
        res["notes"] = notes
    print(json.dumps(res), flush=True)
    log(f"hf maxbatch {name} S={a.seq} {a.dtype}: largest batch that fits {good} (first OOM {bad})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, batch, seq, steps, warmup):
        p.add_argument("--config", default="tiny", help="albert_zh name (tiny, base, large, ...) or path to a JSON config")
        p.add_argument("--batch", type=int, default=batch)
        p.add_argument("--seq", type=int, default=seq)
        p.add_argument("--steps", type=int, default=steps, help="steps (forwards) per timed run")
        p.add_argument("--runs", type=int, default=5, help="timed runs; the median is reported")
        p.add_argument("--warmup", type=int, default=warmup, help="untimed steps first")
        p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
        p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
        p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16 = autocast, fp32 master weights")
        p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="transformers attention implementation")
        p.add_argument("--compile", action="store_true", help="torch.compile the model")
        p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls for fp32 on CUDA (off by default)")
        p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("train", help="AlbertForPreTraining training steps")
    common(p, 32, 128, 10, 2)
    p.add_argument("--masked", type=int, default=20, help="masked (labelled) positions per row")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="peak for MFU (H100/H200 SXM dense bf16: 989)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("infer", help="AlbertModel forward, sentences/s")
    common(p, 64, 64, 3, 1)
    p.set_defaults(func=cmd_infer)

    p = sub.add_parser("maxbatch", help="largest training batch that fits in GPU memory")
    common(p, 0, 128, 0, 0)
    p.add_argument("--masked", type=int, default=20)
    p.add_argument("--max-batch", type=int, default=1 << 14, help="stop doubling here")
    p.add_argument("--granularity", type=int, default=1, help="binary search resolution")
    p.set_defaults(func=cmd_maxbatch)

    a = ap.parse_args()
    if a.cmd != "maxbatch" and (a.batch < 1 or a.seq < 2 or a.steps < 1 or a.runs < 1):
        ap.error("--batch, --steps, --runs must be >= 1 and --seq >= 2")
    if a.threads < 1:
        ap.error("--threads must be >= 1")
    if getattr(a, "masked", 0) < 0 or getattr(a, "masked", 0) >= a.seq:
        ap.error("--masked must be in [0, seq)")
    a.func(a)


if __name__ == "__main__":
    main()
