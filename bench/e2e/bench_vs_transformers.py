"""End-to-end: the qwen_ops engine against transformers' ``generate`` on the same checkpoint and dtype.

    python bench/e2e/bench_vs_transformers.py --smoke                  # a few seconds, tiny model (CI)
    python bench/e2e/bench_vs_transformers.py                          # workloads a, b, c on the tiny model
    python bench/e2e/bench_vs_transformers.py --make-0p8b /tmp/q08b    # write a Qwen3.5-0.8B-shaped random checkpoint
    python bench/e2e/bench_vs_transformers.py --model /tmp/q08b --workloads b --batch-sizes 1,4

Workloads (greedy, random token-id prompts, no EOS stop):
  a  32 requests, prompt lengths drawn from 16..1024, 64 new tokens each;
  b  batch 1, a 512-token prompt, 128 new tokens, ``--repeats`` times after a warm-up, the engines
     alternating (A B A B ...: on a shared machine only such paired runs compare), medians printed;
     ``--ab-small-m-linear`` adds the engine with its CPU small-M projection kernel off
     (``model.layers.set_small_m_linear(False)``: F.linear) as a third engine in the same rotation;
     ``--ab-fused-gdn-decode`` adds the engine with its GDN decode rows composed op by op
     (``model.gdn.set_fused_gdn_decode(False)``) instead of one ``gdn_decode_step`` call per layer;
  c  a sweep over decoding batch sizes (1, 4, 16, 64, 256), 16-token prompts, writes a PNG of
     decode throughput against batch size for both engines.
transformers serves a and b one prompt at a time, and batched with left padding; the batched run
is reported as "same greedy tokens: yes/no" against the one-at-a-time run (padding changes the
GDN/attention arithmetic, so it may not). The sweep's prompts all have one length: no padding.

The memory-bandwidth floor of a decode step is measured in the same run: bytes that must be read
per step (every weight once, each request's KV cache, GDN recurrent state and conv state) over the
read bandwidth torch.sum reaches over a large tensor. measured/floor is printed for b and each
sweep point. Nothing is asserted here except, in --smoke, that both engines gave the same tokens.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from qwen_ops.testing.bandwidth import read_bandwidth

# Qwen3.5-0.8B's text shape (the published config), for a random checkpoint written by --make-0p8b.
QWEN3_5_0P8B = {
    "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 24,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 6,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
    "linear_num_key_heads": 16, "linear_num_value_heads": 16,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "max_position_embeddings": 8192, "tie_word_embeddings": True,
}
WORKLOAD_A = dict(num_requests=32, min_prompt=16, max_prompt=1024, new_tokens=64)
WORKLOAD_B = dict(prompt_len=512, new_tokens=128)
SWEEP = dict(batch_sizes=(1, 4, 16, 64, 256), prompt_len=16, new_tokens=16)
SMOKE = dict(a=dict(num_requests=3, min_prompt=4, max_prompt=24, new_tokens=4),
             b=dict(prompt_len=16, new_tokens=6), c=dict(batch_sizes=(1, 4), prompt_len=8, new_tokens=5))


def make_0p8b_checkpoint(path: str, seed: int = 0) -> str:
    """Write a random Qwen3.5-0.8B-shaped text checkpoint (bf16 on disk, ~1.6 GB) to ``path``."""
    from safetensors.torch import save_file

    from qwen_ops.model.loading.config import Qwen35Config
    from qwen_ops.model.loading.default_model import CONFIG_FILE, _random_weights
    from qwen_ops.model.loading.weights import SINGLE_FILE

    with open(CONFIG_FILE, encoding="utf-8") as f:
        raw = {**json.load(f), **QWEN3_5_0P8B}
    weights = _random_weights(Qwen35Config.from_dict(raw), seed)
    os.makedirs(path, exist_ok=True)
    save_file({f"model.{n}": t for n, t in weights.items()}, os.path.join(path, SINGLE_FILE), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=2)
    return path


# ----------------------------------------------------------------------------- the floor

# The read rate comes from qwen_ops.testing.bandwidth.read_bandwidth.


def decode_step_bytes(llm, batch: int, context_len: int) -> dict[str, int]:
    """Bytes a decode step of ``batch`` requests at ``context_len`` tokens must read, by kind."""
    cfg, elem = llm.config, torch.empty((), dtype=llm.dtype).element_size()
    model = llm.llm_engine.model_runner.model
    # Each storage counted once: tied embeddings are one tensor.
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in _tensors(model)}
    # The embedding table is read one row per request; the lm_head (tied or not) is read whole.
    weights = sum(storages.values())
    if not cfg.tie_word_embeddings:
        weights -= model.embed.numel() * model.embed.element_size()
    n_attn = sum(1 for t in cfg.layer_types if t == "full_attention")
    n_gdn = len(cfg.layer_types) - n_attn
    kv = n_attn * batch * context_len * 2 * cfg.num_key_value_heads * cfg.head_dim * elem
    gdn = n_gdn * batch * cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
    conv_dim = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + cfg.linear_num_value_heads * cfg.linear_value_head_dim
    conv = n_gdn * batch * (cfg.linear_conv_kernel_dim - 1) * conv_dim * elem
    return dict(weights=weights, kv=kv, gdn_state=gdn, conv_state=conv)


def _tensors(obj, seen=None):
    """Every tensor reachable from the model's attributes (its weights)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o, seen)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o, seen)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("qwen_ops"):
        for o in vars(obj).values():
            yield from _tensors(o, seen)


# ----------------------------------------------------------------------------- the two engines

def engine_run(llm, prompts, new_tokens):
    """Serve ``prompts`` together; -> (tokens per prompt, wall s, TTFTs s, ITLs s, decode-only step times s)."""
    from qwen_ops import SamplingParams

    params = SamplingParams(max_tokens=new_tokens, temperature=0, ignore_eos=True, detokenize=False)
    first_step = len(llm.step_stats)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    wall = time.perf_counter() - t0
    tokens = [o.outputs[0].token_ids for o in outs]
    ttft = [o.metrics["first_token_time"] - o.metrics["arrival_time"] for o in outs]
    itl = [(o.metrics["finished_time"] - o.metrics["first_token_time"]) / (len(t) - 1)
           for o, t in zip(outs, tokens) if len(t) > 1]
    decode_steps = [s.seconds for s in llm.step_stats[first_step:] if s.num_prefills == 0 and s.num_decodes]
    return tokens, wall, ttft, itl, decode_steps


class _TokenClock:
    """A transformers streamer that records when each generated token arrives (the first put() is the prompt)."""

    def __init__(self):
        self.times, self._prompt_seen = [], False

    def put(self, value):
        if self._prompt_seen:
            self.times.append(time.perf_counter())
        self._prompt_seen = True

    def end(self):
        pass


def hf_generate(model, prompts, new_tokens, pad_id=0):
    """One generate() over ``prompts`` (left padded); -> (tokens, wall, TTFT, ITL)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    clock = _TokenClock()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, pad_token_id=pad_id, eos_token_id=None, streamer=clock)
    wall = time.perf_counter() - t0
    itl = (clock.times[-1] - clock.times[0]) / (len(clock.times) - 1) if len(clock.times) > 1 else float("nan")
    return out[:, width:].tolist(), wall, clock.times[0] - t0, itl


def hf_one_at_a_time(model, prompts, new_tokens):
    tokens, wall, ttft, itl = [], 0.0, [], []
    for p in prompts:
        t, w, f, i = hf_generate(model, [p], new_tokens)
        tokens += t
        wall += w
        ttft.append(f)
        itl.append(i)
    return tokens, wall, ttft, itl


# ----------------------------------------------------------------------------- reporting

HEADER = ("| workload | engine | requests | prompt tok | output tok | wall s | output tok/s | mean TTFT ms | "
          "mean ITL ms | vs transformers | same tokens |")


def row(workload, engine, prompts, tokens, wall, ttft, itl, base_tps=None, same="ref"):
    out = sum(len(t) for t in tokens)
    tps = out / wall
    ratio = f"{tps / base_tps:.2f}x" if base_tps else "1.00x"
    print(f"| {workload} | {engine} | {len(prompts)} | {sum(len(p) for p in prompts)} | {out} | {wall:.3f} | "
          f"{tps:.1f} | {1e3 * statistics.mean(ttft):.1f} | {1e3 * statistics.mean(itl):.2f} | {ratio} | {same} |",
          flush=True)
    return tps


def compare_serving(name, llm, hf, prompts, new_tokens, batched_hf=True):
    """Print the rows of one workload; -> (engine tokens == one-at-a-time transformers tokens, engine decode steps).

    The engine and batched transformers each serve the workload once untimed first (first-call allocations and
    page faults), as workload b does; transformers one at a time is warmed by its own first prompt.
    """
    engine_run(llm, prompts, new_tokens)
    e_tok, e_wall, e_ttft, e_itl, steps = engine_run(llm, prompts, new_tokens)
    h_tok, h_wall, h_ttft, h_itl = hf_one_at_a_time(hf, prompts, new_tokens)
    base = row(name, "transformers, one at a time", prompts, h_tok, h_wall, h_ttft, h_itl)
    if batched_hf and len(prompts) > 1:
        hf_generate(hf, prompts, new_tokens)
        b_tok, b_wall, b_ttft, b_itl = hf_generate(hf, prompts, new_tokens)
        row(name, "transformers, batched (left pad)", prompts, b_tok, b_wall, [b_ttft], [b_itl], base,
            "yes" if b_tok == h_tok else "no")
    same = e_tok == h_tok
    row(name, "qwen_ops LLM", prompts, e_tok, e_wall, e_ttft, e_itl, base, "yes" if same else "no")
    return same, steps


def single_request(llm, hf, prompts, new_tokens, repeats, ab_small_m_linear, bandwidth, ab_fused_gdn_decode=False):
    """Workload b: each engine ``repeats`` times after one warm-up, alternating; print medians, then the floor.

    -> whether every engine run gave transformers' greedy tokens.
    """
    from qwen_ops.model.network.gdn import fused_gdn_decode_enabled, set_fused_gdn_decode
    from qwen_ops.model.network.layers import set_small_m_linear

    gdn_decode_default = fused_gdn_decode_enabled()

    def engine(small_m, gdn_decode=gdn_decode_default):
        def run():
            previous = set_small_m_linear(small_m), set_fused_gdn_decode(gdn_decode)
            try:
                return engine_run(llm, prompts, new_tokens)
            finally:
                set_small_m_linear(previous[0])
                set_fused_gdn_decode(previous[1])
        return run

    engines = {"transformers, one at a time": lambda: hf_one_at_a_time(hf, prompts, new_tokens),
               "qwen_ops LLM": engine(True)}
    if ab_small_m_linear:
        engines["qwen_ops LLM, F.linear"] = engine(False)
    if ab_fused_gdn_decode:
        engines["qwen_ops LLM, GDN decode op by op"] = engine(True, gdn_decode=False)
    for run in engines.values():
        run()  # warm-up: first-call allocations, page faults on the weights
    runs = {name: [] for name in engines}
    for _ in range(repeats):
        for name, run in engines.items():
            runs[name].append(run())
    med = statistics.median
    ref_tokens = runs["transformers, one at a time"][0][0]
    base, all_same = None, True
    for name, results in runs.items():
        tokens = results[0][0]
        consistent = all(r[0] == tokens for r in results)
        same = "ref" if base is None else ("yes" if tokens == ref_tokens and consistent else "no")
        all_same &= same != "no"
        tps = row("b", name, prompts, tokens, med(r[1] for r in results), [med(r[2][0] for r in results)],
                  [med(r[3][0] for r in results)], base, same)
        base = base or tps
    for name, results in runs.items():
        if name.startswith("qwen_ops"):
            step = med(med(r[4]) for r in results)
            floor_line(f"b ({name})" if len(engines) > 2 else "b", llm, 1, len(prompts[0]) + new_tokens // 2, step,
                       bandwidth)
    if repeats > 1:
        print(f"(workload b: medians of {repeats} alternating runs per engine after a warm-up; "
              f"load average {os.getloadavg()[0]:.1f} at the end)")
    return all_same


def floor_line(name, llm, batch, context_len, step_s, bandwidth):
    parts = decode_step_bytes(llm, batch, context_len)
    floor = sum(parts.values()) / bandwidth
    detail = " ".join(f"{k}={v / 1e6:.1f}MB" for k, v in parts.items())
    print(f"floor {name}: batch={batch} context={context_len} {detail} -> floor {1e3 * floor:.2f} ms; "
          f"measured median decode step {1e3 * step_s:.2f} ms; measured/floor {step_s / floor:.2f}", flush=True)


def sweep(llm, hf, vocab, spec, bandwidth, gen, plot_path):
    """Decode throughput (tok/s) against batch size for both engines; same-length prompts, no padding."""
    print(f"\nsweep: prompt_len={spec['prompt_len']} new_tokens={spec['new_tokens']}")
    print("| batch | qwen_ops decode tok/s | transformers decode tok/s | ratio | same tokens |")
    print("|---|---|---|---|---|")
    results, all_same = [], True
    for b in spec["batch_sizes"]:
        prompts = random_prompts(gen, vocab, [spec["prompt_len"]] * b)
        e_tok, _, _, _, steps = engine_run(llm, prompts, spec["new_tokens"])
        e_step = statistics.median(steps)
        h_tok, _, _, h_itl = hf_generate(hf, prompts, spec["new_tokens"])
        e_tps, h_tps = b / e_step, b / h_itl
        same = e_tok == h_tok
        all_same &= same
        print(f"| {b} | {e_tps:.1f} | {h_tps:.1f} | {e_tps / h_tps:.2f}x | {'yes' if same else 'no'} |", flush=True)
        results.append((b, e_tps, h_tps, e_step))
    for b, _, _, e_step in results:
        floor_line(f"sweep b={b}", llm, b, spec["prompt_len"] + spec["new_tokens"] // 2, e_step, bandwidth)
    if plot_path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [r[0] for r in results]
        ax.plot(xs, [r[1] for r in results], "o-", label="qwen_ops LLM")
        ax.plot(xs, [r[2] for r in results], "s-", label="transformers generate (batched)")
        ax.set(xscale="log", yscale="log", xlabel="decoding requests", ylabel="decode tok/s",
               title="decode throughput vs batch size")
        ax.legend()
        fig.tight_layout()
        fig.savefig(plot_path)
        print(f"plot written to {plot_path}")
    return all_same


def random_prompts(gen, vocab, lengths):
    return [torch.randint(1, min(vocab, 100000), (n,), generator=gen).tolist() for n in lengths]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint dir (default: the built-in tiny model)")
    p.add_argument("--make-0p8b", metavar="DIR", help="write a random Qwen3.5-0.8B-shaped checkpoint to DIR and exit")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--workloads", default="abc", help="any of a, b, c")
    p.add_argument("--batch-sizes", default=None, help="sweep batch sizes, comma separated (default 1,4,16,64,256)")
    p.add_argument("--num-requests", type=int, default=None, help="override workload a's request count")
    p.add_argument("--new-tokens", type=int, default=None, help="override the new tokens of workloads b and c")
    p.add_argument("--plot", default="bench/e2e/throughput_vs_batch.png")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for both engines")
    p.add_argument("--repeats", type=int, default=1, help="workload b: runs per engine after a warm-up, alternating")
    p.add_argument("--ab-small-m-linear", action="store_true",
                   help="workload b: also run the engine with its CPU small-M projection kernel off (F.linear)")
    p.add_argument("--ab-fused-gdn-decode", action="store_true",
                   help="workload b: also run the engine with its GDN decode rows composed op by op")
    p.add_argument("--smoke", action="store_true", help="tiny shapes, a few seconds (CI); exits 1 if tokens differ")
    args = p.parse_args(argv)
    if args.make_0p8b:
        print(make_0p8b_checkpoint(args.make_0p8b))
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    from qwen_ops import LLM
    from qwen_ops.model.loading.default_model import default_model_dir
    from transformers import AutoModelForCausalLM

    a, b, c = (SMOKE["a"], SMOKE["b"], SMOKE["c"]) if args.smoke else (dict(WORKLOAD_A), WORKLOAD_B, dict(SWEEP))
    if args.num_requests:
        a["num_requests"] = args.num_requests
    if args.new_tokens:
        b, c = {**b, "new_tokens": args.new_tokens}, {**c, "new_tokens": args.new_tokens}
    if args.batch_sizes:
        c["batch_sizes"] = tuple(int(x) for x in args.batch_sizes.split(","))
    model_dir = args.model or default_model_dir()
    max_seqs = max(max(c["batch_sizes"]), a["num_requests"])
    llm = LLM(model_dir, dtype=args.dtype, max_num_seqs=max_seqs,
              max_num_batched_tokens=max(2048, max_seqs), max_model_len=2048)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, args.dtype)).eval()
    vocab = llm.config.vocab_size
    bandwidth = read_bandwidth(64 << 20 if args.smoke else 512 << 20, statistic=min)  # the best pass
    load = os.getloadavg()
    print(f"model={model_dir} dtype={args.dtype} threads={torch.get_num_threads()} "
          f"read bandwidth (torch.sum) {bandwidth / 1e9:.1f} GB/s; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    gen = torch.Generator().manual_seed(0)
    all_same = True
    print(HEADER)
    print("|---" * (HEADER.count("|") - 1) + "|")
    if "a" in args.workloads:
        lengths = torch.randint(a["min_prompt"], a["max_prompt"] + 1, (a["num_requests"],), generator=gen).tolist()
        same, _ = compare_serving("a", llm, hf, random_prompts(gen, vocab, lengths), a["new_tokens"])
        all_same &= same
    if "b" in args.workloads:
        all_same &= single_request(llm, hf, random_prompts(gen, vocab, [b["prompt_len"]]), b["new_tokens"],
                                   args.repeats, args.ab_small_m_linear, bandwidth, args.ab_fused_gdn_decode)
    if "c" in args.workloads:
        all_same &= sweep(llm, hf, vocab, c, bandwidth, gen, None if args.smoke else args.plot)
    print(f"same greedy tokens, qwen_ops vs transformers one at a time: {'yes' if all_same else 'NO'}")
    return 0 if all_same or not args.smoke else 1


if __name__ == "__main__":
    raise SystemExit(main())
