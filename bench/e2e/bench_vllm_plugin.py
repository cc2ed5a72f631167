"""Time per engine step: vLLM 0.33 + the qwen_ops plug-in against the project's own engine, same tiny workload.

Run in the vLLM environment (vLLM 0.33.0 + qwen_ops[vllm], e.g. the one .ci/vllm_tests caches):

    python bench/e2e/bench_vllm_plugin.py                      # tiny random text checkpoint (tests' TINY_TEXT)
    python bench/e2e/bench_vllm_plugin.py --num-prompts 8 --prompt-len 64 --max-tokens 32 --budget 128

Both engines run the same greedy requests (random token ids, no EOS stop) with the same
limits (token budget, max_num_seqs, float32, torch backend of the qwen_ops ops), each in
its own process (vLLM changes process-wide torch settings), stepping the engine by hand and
timing each step. Prints a table; nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import statistics
import sys
import tempfile
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_vllm(model, prompts, max_tokens, budget, max_num_seqs):
    from vllm import LLM, SamplingParams

    llm = LLM(model, dtype="float32", enforce_eager=True, skip_tokenizer_init=True,
              compilation_config={"custom_ops": ["none"]}, kv_cache_memory_bytes=64 << 20,
              enable_prefix_caching=False, max_model_len=512, max_num_batched_tokens=budget,
              max_num_seqs=max_num_seqs)
    engine = llm.llm_engine
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(str(i), {"prompt_token_ids": p}, params)
    steps = []
    while engine.has_unfinished_requests():
        t0 = time.perf_counter()
        engine.step()
        steps.append(time.perf_counter() - t0)
    return steps


def run_qwen_ops(model, prompts, max_tokens, budget, max_num_seqs):
    from qwen_ops import LLM, SamplingParams

    llm = LLM(model, dtype="float32", max_num_batched_tokens=budget, max_num_seqs=max_num_seqs, num_blocks=256,
              max_model_len=512)
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True, detokenize=False)
    for p in prompts:
        llm.add_request(p, params)
    steps = []
    while llm.has_unfinished_requests():
        t0 = time.perf_counter()
        llm.step()  # returns this step's RequestOutputs, empty on a step of prefill chunks only
        steps.append(time.perf_counter() - t0)
    return steps


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="a Qwen3.5 checkpoint directory (default: a tiny random one)")
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--budget", type=int, default=64, help="max_num_batched_tokens of both engines")
    ap.add_argument("--max-num-seqs", type=int, default=4)
    ap.add_argument("--engine", choices=("vllm", "qwen_ops"), help=argparse.SUPPRESS)  # one engine, in a child
    args = ap.parse_args(argv)

    import torch

    if args.engine:
        gen = torch.Generator().manual_seed(0)
        prompts = [torch.randint(1, 256, (args.prompt_len,), generator=gen).tolist() for _ in range(args.num_prompts)]
        fn = run_vllm if args.engine == "vllm" else run_qwen_ops
        steps = fn(args.model, prompts, args.max_tokens, args.budget, args.max_num_seqs)
        print("STEPS " + json.dumps({"steps": steps, "threads": torch.get_num_threads()}), flush=True)
        return

    model = args.model
    if model is None:
        sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
        from checkpoints import save_text_checkpoint

        model = save_text_checkpoint(tempfile.mkdtemp(prefix="qwen35_tiny_"), seed=0)
    load = os.getloadavg()[0]
    rows = []
    for name, engine in (("vLLM 0.33 + qwen_ops plug-in", "vllm"), ("qwen_ops engine", "qwen_ops")):
        cmd = [sys.executable, os.path.abspath(__file__), "--engine", engine, "--model", model,
               "--num-prompts", str(args.num_prompts), "--prompt-len", str(args.prompt_len),
               "--max-tokens", str(args.max_tokens), "--budget", str(args.budget),
               "--max-num-seqs", str(args.max_num_seqs)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        got = json.loads([line for line in out.splitlines() if line.startswith("STEPS ")][-1][6:])
        steps = got["steps"]
        rows.append((name, len(steps), statistics.median(steps) * 1e3, statistics.mean(steps) * 1e3, sum(steps),
                     got["threads"]))
    print(f"\nworkload: {args.num_prompts} prompts x {args.prompt_len} tokens, {args.max_tokens} new tokens each, "
          f"budget {args.budget}, max_num_seqs {args.max_num_seqs}, float32; load average at start {load:.1f}")
    print(f"{'engine':32s} {'steps':>6s} {'median step ms':>15s} {'mean step ms':>13s} {'total s':>8s} "
          f"{'torch threads':>13s}")
    for name, n, med, mean, total, threads in rows:
        print(f"{name:32s} {n:6d} {med:15.1f} {mean:13.1f} {total:8.2f} {threads:13d}")


if __name__ == "__main__":
    main()
