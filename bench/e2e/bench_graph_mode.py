"""Eager against graph mode (``LLM(enforce_eager=False)``) in one run: end to end and the decode step.

    python bench/e2e/bench_graph_mode.py                       # tiny default model, e2e workload, CPU
    python bench/e2e/bench_graph_mode.py --model DIR --requests 1 --prompt-lens 32 --new-tokens 16
                                                               # the 0.8B-shaped decode step (batch 1)
    python bench/e2e/bench_graph_mode.py --device cuda         # on a GPU: inductor + CUDA graphs (bench/device_check.sh)
    python bench/e2e/bench_graph_mode.py --smoke               # seconds: the script runs (CI, any machine)

Each engine (eager, then graph with --backend) is built once and serves the workload once untimed: the
graph engine compiles there (its first compile and its total compile time are printed). Then --rounds
rounds alternate the engines (eager, graph, graph, eager, ...); each round gives the wall time, output
tok/s and the median pure-decode step (steps whose every token is a decode, from ``step_stats``). The
table gives the medians over the rounds and the ratio eager/graph (> 1: graph mode is faster); both
engines must give the same greedy tokens (exit 1 otherwise). The load average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch


def workload(requests: int, prompt_lens: list[int], seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 200, (prompt_lens[i % len(prompt_lens)],), generator=gen).tolist()
            for i in range(requests)]


def serve(llm, prompts, params) -> dict:
    """One timed pass of ``prompts``: wall s, generated tokens, median pure-decode step ms, the tokens."""
    engine = llm.llm_engine
    first = len(engine.step_stats)
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    wall = time.perf_counter() - start
    steps = engine.step_stats[first:]
    decode = [s.seconds * 1e3 for s in steps if s.num_decodes and s.num_decodes == s.num_tokens]
    tokens = [o.outputs[0].token_ids for o in outs]
    return dict(wall_s=wall, generated=sum(map(len, tokens)), decode_step_ms=statistics.median(decode)
                if decode else float("nan"), tokens=tokens)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint (default: the built-in tiny model)")
    p.add_argument("--device", default=None)
    p.add_argument("--backend", default=None, help="compile_backend (default: the device's)")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--prompt-lens", default="16,48,96,160", help="cycled over the requests")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--max-num-batched-tokens", type=int, default=256)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--smoke", action="store_true", help="tiny shapes, aot_eager, one round")
    args = p.parse_args(argv)
    if args.smoke:
        args.requests, args.prompt_lens, args.new_tokens, args.rounds = 2, "5,9", 3, 1
        args.max_num_batched_tokens, args.max_num_seqs = 16, 2
        args.backend = args.backend or "aot_eager"
    if args.threads:
        torch.set_num_threads(args.threads)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    from qwen_ops import LLM, SamplingParams

    prompts = workload(args.requests, [int(x) for x in args.prompt_lens.split(",")])
    params = SamplingParams(max_tokens=args.new_tokens, temperature=0, ignore_eos=True, detokenize=False)
    # No prefix caching: every pass then schedules the same steps, so the untimed pass compiles every shape
    # the timed rounds meet (with it, later passes hit the cache and meet new step shapes).
    common = dict(max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
                  device=args.device, enable_prefix_caching=False)
    load_before = os.getloadavg()
    print(f"== load average before {load_before[0]:.2f} {load_before[1]:.2f}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {len(prompts)} requests, prompts {args.prompt_lens}, "
          f"{args.new_tokens} new tokens", flush=True)
    engines = {}
    for name, extra in (("eager", dict(enforce_eager=True)),
                        ("graph", dict(enforce_eager=False, compile_backend=args.backend))):
        start = time.perf_counter()
        llm = LLM(args.model, **common, **extra)
        built = time.perf_counter() - start
        warm = serve(llm, prompts, params)  # untimed: the graph engine compiles its shapes here
        engines[name] = llm
        line = f"== {name}: built (warm-up included) in {built:.1f} s, first pass {warm['wall_s']:.1f} s"
        g = llm.llm_engine.model_runner.graphs
        if g is not None:
            from qwen_ops.model.worker.graph_runner import compiled_shapes

            line += (f"; first graph compiled in {g.first_compile_s:.1f} s, {len(g.shapes)} shapes, "
                     f"{sum(compiled_shapes.values()):.1f} s compiling in all; "
                     f"{llm.llm_engine.engine_config.describe_graph_mode()}")
        print(line, flush=True)
    rounds = {"eager": [], "graph": []}
    order = ["eager", "graph"]
    for r in range(args.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            rounds[name].append(serve(engines[name], prompts, params))
            x = rounds[name][-1]
            print(f"round {r} {name}: {x['wall_s']:.3f} s, {x['generated'] / x['wall_s']:.1f} tok/s, "
                  f"decode step {x['decode_step_ms']:.2f} ms", flush=True)
    same = all(a["tokens"] == b["tokens"] for a, b in zip(rounds["eager"], rounds["graph"]))
    med = {name: {k: statistics.median(x[k] for x in rs) for k in ("wall_s", "decode_step_ms")}
           for name, rs in rounds.items()}
    load_after = os.getloadavg()
    for name in order:
        g = engines[name].llm_engine.model_runner.graphs
        if g is not None:
            print(f"== {name}: {g.graph_steps} steps through graphs, {g.eager_steps} eager, {len(g.shapes)} shapes")
    print(f"\n| engine | wall s | output tok/s | median decode step ms |")
    print("|---|---:|---:|---:|")
    generated = rounds["eager"][0]["generated"]
    for name in order:
        print(f"| {name} | {med[name]['wall_s']:.3f} | {generated / med[name]['wall_s']:.1f} | "
              f"{med[name]['decode_step_ms']:.2f} |")
    ratio_wall = med["eager"]["wall_s"] / med["graph"]["wall_s"]
    ratio_step = med["eager"]["decode_step_ms"] / med["graph"]["decode_step_ms"]
    print(f"\neager/graph: wall {ratio_wall:.3f}x, decode step {ratio_step:.3f}x (medians of {args.rounds}); "
          f"tokens {'identical' if same else 'DIFFER'}; load average after {load_after[0]:.2f} "
          f"{load_after[1]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(medians=med, ratio_wall=ratio_wall, ratio_decode_step=ratio_step, same_tokens=same,
                           load_before=load_before, load_after=load_after, args=vars(args)), f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
