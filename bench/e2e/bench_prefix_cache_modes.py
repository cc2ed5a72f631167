"""Hybrid prefix caching end to end: "chunk" mode against "align" mode, on shared prefixes of 70-520 tokens served twice.

    python bench/e2e/bench_prefix_cache_modes.py [--repeats 3]

The built-in tiny default model (random weights, Qwen3.5's layer pattern: 3 GDN layers and 1 attention layer,
GDN 4 heads x 64 x 64 float32 against 2 KV heads x 64 of attention; align mode raises its 16-token block until
a page holds a GDN state), float32, on the CPU. Workload: 8 prefixes of 70-520 tokens, 3 prompts each with
their own 24-token tails; every prompt is served alone (``LLM.generate``, one output token) once to fill the
cache, then again. Per mode: the block size and the budget line's state memory, the second pass's hit
tokens against what a 64-token granularity allows, and the time to first token of the second pass (median
over its 24 prompts, then the median over ``--repeats`` fresh engines; both modes alternate in one run).
Scheduler-level figures at Qwen3.5-0.8B's proportions: ``bench/scheduler/bench_prefix_cache_modes.py``.
"""
from __future__ import annotations

import argparse
import random
import statistics

from qwen_ops import LLM, SamplingParams

PARAMS = SamplingParams(max_tokens=1, temperature=0, detokenize=False)


def workload(seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prompts = []
    for i in range(8):
        prefix = [rng.randrange(1, 50000) for _ in range(70 + round(i * (520 - 70) / 7))]
        prompts += [prefix + [rng.randrange(1, 50000) for _ in range(24)] for _ in range(3)]
    return prompts


def run(mode: str, prompts: list[list[int]]) -> dict:
    llm = LLM(enable_prefix_caching=True, mamba_cache_mode=mode, max_model_len=1024, max_num_seqs=4,
              kv_cache_memory_gib=0.5)
    for p in prompts:
        llm.generate([p], PARAMS)
    outs = [llm.generate([p], PARAMS)[0] for p in prompts]
    ttft = [o.metrics["first_token_time"] - o.metrics["arrival_time"] for o in outs]
    engine = llm.llm_engine
    return dict(block=engine.scheduler_config.block_size, hits=sum(o.num_cached_tokens for o in outs),
                allowed=sum((len(p) - 1) // 64 * 64 for p in prompts), ttft_ms=statistics.median(ttft) * 1e3,
                line=engine.engine_config.describe())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    prompts = workload()
    results = {"chunk": [], "align": []}
    for _ in range(args.repeats):
        for mode in results:
            results[mode].append(run(mode, prompts))
    print(f"{'mode':<6} {'block':>5} {'pass-2 hits':>11} {'of 64-granular':>14} {'%':>6} {'TTFT ms (median)':>16}  "
          "state memory (budget line)")
    for mode, rows in results.items():
        r = rows[0]
        ttft = statistics.median(x["ttft_ms"] for x in rows)
        states = [part for part in r["line"].split(" prefix_caching")[0].split(") ") if "gdn_states" in part]
        print(f"{mode:<6} {r['block']:>5} {r['hits']:>11} {r['allowed']:>14} {100 * r['hits'] / r['allowed']:>6.1f} "
              f"{ttft:>16.1f}  {states[0] if states else '-'}")


if __name__ == "__main__":
    main()
