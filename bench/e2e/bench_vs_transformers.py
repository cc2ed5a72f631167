"""End-to-end throughput: the qwen_ops engine against transformers' ``generate`` on the same model.

    python bench/e2e/bench_vs_transformers.py                 # built-in tiny model, 8 prompts
    python bench/e2e/bench_vs_transformers.py --model DIR --num-prompts 16 --prompt-len 128 --max-tokens 64

Both run greedy decoding of the same random token-id prompts (no EOS stop).
transformers runs the prompts one at a time (its generate has no continuous
batching; batching with left padding would change the GDN results), the
engine serves them all at once. Prints a table; nothing is asserted.
"""
from __future__ import annotations

import argparse
import time

import torch


def run_engine(model_dir, prompts, max_tokens, backend):
    from qwen_ops import LLM, SamplingParams

    llm = LLM(model_dir, backend=backend)
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True, detokenize=False)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    wall = time.perf_counter() - start
    ttft = [o.metrics["first_token_time"] - o.metrics["arrival_time"] for o in outputs]
    return wall, sum(len(o.outputs[0].token_ids) for o in outputs), sum(ttft) / len(ttft)


def run_transformers(model_dir, prompts, max_tokens):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    generated, ttft = 0, []
    start = time.perf_counter()
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            t0 = time.perf_counter()
            model(ids)  # the prefill alone: time to first token
            ttft.append(time.perf_counter() - t0)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                                 min_new_tokens=max_tokens, do_sample=False, pad_token_id=0)
            generated += out.shape[1] - ids.shape[1]
    wall = time.perf_counter() - start - sum(ttft)  # the extra prefill is not part of generate's work
    return wall, generated, sum(ttft) / len(ttft)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint dir (default: the built-in tiny model)")
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--backend", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for both")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = args.model
    if model_dir is None:
        from qwen_ops.model.default_model import default_model_dir

        model_dir = default_model_dir()
    from qwen_ops.model.config import Qwen35Config

    vocab = Qwen35Config.from_pretrained(model_dir).vocab_size
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, min(vocab, 100000), (args.prompt_len,), generator=gen).tolist()
               for _ in range(args.num_prompts)]
    rows = [("qwen_ops LLM (continuous batching)", *run_engine(model_dir, prompts, args.max_tokens, args.backend)),
            ("transformers generate (one prompt at a time)", *run_transformers(model_dir, prompts, args.max_tokens))]
    prompt_tokens = args.num_prompts * args.prompt_len
    print(f"model={model_dir} prompts={args.num_prompts} prompt_len={args.prompt_len} "
          f"max_tokens={args.max_tokens} threads={torch.get_num_threads()}")
    print(f"| {'engine':46s} | wall s | prompt tok/s | gen tok/s | mean TTFT ms |")
    print(f"|{'-' * 48}|--------|--------------|-----------|--------------|")
    for name, wall, generated, ttft in rows:
        print(f"| {name:46s} | {wall:6.2f} | {prompt_tokens / wall:12.1f} | {generated / wall:9.1f} | "
              f"{ttft * 1e3:12.1f} |")


if __name__ == "__main__":
    main()
