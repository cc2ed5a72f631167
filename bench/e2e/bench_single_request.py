"""Workload (b) of issue 15: one request, a 512-token prompt, 128 new tokens, qwen_ops.LLM vs transformers.

    python bench/e2e/bench_single_request.py --model DIR [--prompt-len 512 --max-tokens 128 --repeats 3]
    python bench/e2e/bench_single_request.py --smoke        # built-in tiny model, seconds (what CI runs)

Both engines decode greedily from the same random token-id prompt on the same
checkpoint in float32, through their public APIs only: ``LLM(...).generate``
(its ``RequestOutput.metrics``) and transformers' ``generate`` (a streamer
records when each token is produced). Each engine runs ``--repeats`` times
after a warm-up, alternately, and the medians are printed: wall time, output
tok/s, time to first token (TTFT), inter-token latency (ITL: the time from the
first to the last token over the tokens between), whether the greedy tokens
are the same, and the ratio of the two. The memory-bandwidth floor of a decode
step is printed beside them: the bytes a step must read (every weight except
the embedding table, which a step reads one row of unless it is tied to the
LM head; the KV cache at the mean context; the GDN and conv states) over the
read bandwidth of ``torch.sum`` measured in the same run. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from qwen_ops.testing.bandwidth import read_bandwidth

F32_BYTES = 4


def decode_step_bytes(config, context: int) -> int:
    """Bytes one float32 decode step of one request must read at ``context`` tokens (see the module docstring)."""
    from qwen_ops.model.weights import expected_shapes

    weights = 0
    for name, shape in expected_shapes(config).items():
        if name.endswith("embed_tokens.weight") and not config.tie_word_embeddings:
            continue  # one row per step
        weights += F32_BYTES * torch.Size(shape).numel()
    kv = 2 * config.num_key_value_heads * config.head_dim * context * F32_BYTES * len(config.full_attention_layers)
    hk, hv = config.linear_num_key_heads, config.linear_num_value_heads
    dk, dv = config.linear_key_head_dim, config.linear_value_head_dim
    conv_channels = 2 * hk * dk + hv * dv
    states = F32_BYTES * (hv * dk * dv + (config.linear_conv_kernel_dim - 1) * conv_channels)
    return weights + kv + states * len(config.linear_attention_layers)


def run_engine(llm, prompt, max_tokens):
    """(wall s, token ids, TTFT s, ITL s) of one request through LLM.generate."""
    from qwen_ops import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True, detokenize=False)
    start = time.perf_counter()
    (output,) = llm.generate([prompt], params)
    wall = time.perf_counter() - start
    tokens = list(output.outputs[0].token_ids)
    metrics = output.metrics
    ttft = metrics["first_token_time"] - metrics["arrival_time"]
    itl = (metrics["finished_time"] - metrics["first_token_time"]) / max(len(tokens) - 1, 1)
    return wall, tokens, ttft, itl


class _TokenTimes:
    """A transformers streamer (put/end) that records when each generated token arrives."""

    def __init__(self):
        self.times, self._prompt_seen = [], False

    def put(self, value):
        if not self._prompt_seen:  # generate puts the prompt first
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self):
        pass


def run_transformers(model, prompt, max_tokens):
    """(wall s, token ids, TTFT s, ITL s) of one request through transformers' generate."""
    ids = torch.tensor([prompt])
    streamer = _TokenTimes()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                             min_new_tokens=max_tokens, do_sample=False, pad_token_id=0, streamer=streamer)
    wall = time.perf_counter() - start
    tokens = out[0, ids.shape[1]:].tolist()
    times = streamer.times
    itl = (times[-1] - times[0]) / max(len(times) - 1, 1)
    return wall, tokens, times[0] - start, itl


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint dir (default: the built-in tiny model)")
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for both")
    parser.add_argument("--smoke", action="store_true", help="tiny model, 16-token prompt, 4 tokens, 1 repeat")
    args = parser.parse_args(argv)
    if args.smoke:
        args.prompt_len, args.max_tokens, args.repeats = 16, 4, 1
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM

    from qwen_ops import LLM
    from qwen_ops.model.config import Qwen35Config

    model_dir = args.model
    if model_dir is None:
        from qwen_ops.model.default_model import default_model_dir

        model_dir = default_model_dir()
    config = Qwen35Config.from_pretrained(model_dir)
    prompt = torch.randint(1, min(config.vocab_size, 100000), (args.prompt_len,),
                           generator=torch.Generator().manual_seed(0)).tolist()

    llm = LLM(model_dir, backend=args.backend)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    engines = {"qwen_ops LLM": lambda: run_engine(llm, prompt, args.max_tokens),
               "transformers generate": lambda: run_transformers(reference, prompt, args.max_tokens)}
    for run in engines.values():  # warm-up
        run()
    results = {name: [] for name in engines}
    for _ in range(args.repeats):
        for name, run in engines.items():
            results[name].append(run())
    bandwidth = read_bandwidth((64 if args.smoke else 512) << 20)
    floor = decode_step_bytes(config, args.prompt_len + args.max_tokens // 2) / bandwidth

    print(f"model={model_dir} prompt_len={args.prompt_len} max_tokens={args.max_tokens} repeats={args.repeats} "
          f"threads={torch.get_num_threads()} load average {os.getloadavg()[0]:.1f}; read bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s; decode-step floor {floor * 1e3:.2f} ms (medians below)")
    print("| engine | wall s | output tok/s | TTFT ms | ITL ms | ITL / floor |")
    print("|---|---:|---:|---:|---:|---:|")
    summary = {}
    for name, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        ttft = statistics.median(r[2] for r in runs)
        itl = statistics.median(r[3] for r in runs)
        summary[name] = dict(wall=wall, tok_s=args.max_tokens / wall, ttft=ttft, itl=itl, tokens=runs[0][1])
        print(f"| {name} | {wall:.2f} | {args.max_tokens / wall:.1f} | {ttft * 1e3:.1f} | {itl * 1e3:.2f} "
              f"| {itl / floor:.2f}x |")
    ours, theirs = summary["qwen_ops LLM"], summary["transformers generate"]
    same = ours["tokens"] == theirs["tokens"]
    print(f"speed-up of qwen_ops over transformers (above 1: qwen_ops faster): output tok/s "
          f"{ours['tok_s'] / theirs['tok_s']:.2f}x, TTFT {theirs['ttft'] / ours['ttft']:.2f}x, "
          f"ITL {theirs['itl'] / ours['itl']:.2f}x; "
          f"same greedy tokens: {'yes' if same else 'NO'}; load average {os.getloadavg()[0]:.1f} at end")
    summary.update(floor=floor, bandwidth=bandwidth, same_tokens=same)
    return summary


if __name__ == "__main__":
    main()
