"""Where the engine's decode step goes, host side included, and workload (a) with the sampler before/after.

    python bench/e2e/bench_host_overhead.py --phases 32,256          # phase table of a decode step
    python bench/e2e/bench_host_overhead.py --ab-rounds 3            # + workload (a), sampler A/B
    python bench/e2e/bench_host_overhead.py --threads 1 ...          # torch.set_num_threads first

--phases N,...: N requests decode together (--context-tokens each); every phase of the step
(schedule, the persistent batch, StepMetadata build and validate, StepInputs, the forward, the
lm_head, sampling, update_from_output, output building) is timed with perf_counter wrappers and
its median over --steps decode steps printed with its share of the median step. The host phases
are everything but the forward, the lm_head and sampling.

--sampler-rows S,...: sample() alone on random greedy logits [S, vocab], before/after, interleaved.

--ab-rounds R: workload (a) of bench_vs_transformers.py (32 requests, prompts of 16..1024 tokens,
64 new tokens, greedy) served R times by each variant, alternating (ABBA): "before" samples greedy rows
with torch.argmax (the sampler before greedy_argmax), "after" with greedy_argmax. Prints each
round's output tok/s and the median of the paired ratios; both variants must give the same tokens.
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HOST_PHASES = ("schedule", "input_batch.update", "input_batch.prepare", "validate", "StepInputs.build",
               "update_from_output", "engine._apply", "engine._output")


def timed(owner, name: str, label: str, acc: dict) -> None:
    """Wrap ``owner.name`` so that each call adds its wall time to ``acc[label]``."""
    f = getattr(owner, name)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            acc[label] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def make_llm(model, max_num_seqs: int):
    from qwen_ops import LLM

    return LLM(model, dtype="float32", max_num_seqs=max_num_seqs, max_num_batched_tokens=max(2048, max_num_seqs),
               max_model_len=2048)


def phase_table(model, batch: int, context: int, steps: int) -> None:
    import qwen_ops.model.worker.model_runner as model_runner
    import qwen_ops.model.network.step_inputs as step_inputs
    import qwen_ops.scheduling.step_metadata as step_metadata
    from qwen_ops import SamplingParams

    llm = make_llm(model, batch)
    engine = llm.llm_engine
    runner = engine.model_runner
    acc = collections.defaultdict(float)
    for owner, name, label in (
            (engine.scheduler, "schedule", "schedule"), (engine.scheduler, "update_from_output", "update_from_output"),
            (runner.input_batch, "update", "input_batch.update"), (runner.input_batch, "prepare", "input_batch.prepare"),
            (step_metadata.StepMetadata, "validate", "validate"), (step_inputs.StepInputs, "build", "StepInputs.build"),
            (runner.model, "forward", "model.forward"), (runner.model, "compute_logits", "compute_logits (lm_head)"),
            (runner.model, "greedy_tokens", "greedy_tokens (lm_head + argmax, greedy steps)"),
            (model_runner, "sample", "sample"), (runner, "execute", "(model_runner.execute, all of it)"),
            (runner, "_forward", "(model_runner._forward, all of it)"), (engine, "_apply", "engine._apply"),
            (engine, "_output", "engine._output")):
        timed(owner, name, label, acc)
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(max_tokens=steps + 8, temperature=0, ignore_eos=True, detokenize=False)
    for _ in range(batch):
        engine.add_request(torch.randint(1, min(llm.config.vocab_size, 100000), (context,), generator=gen).tolist(),
                           params)
    while not engine.step_stats or engine.step_stats[-1].num_prefills or engine.step_stats[-1].num_decodes < batch:
        engine.step()  # the prefills
    per_phase, step_times = collections.defaultdict(list), []
    for _ in range(steps):
        acc.clear()
        start = time.perf_counter()
        engine.step()
        step_times.append(time.perf_counter() - start)
        for label, seconds in acc.items():
            per_phase[label].append(seconds)
    step = statistics.median(step_times)
    print(f"\ndecode step, {batch} requests of {context} prompt tokens: median {step * 1e3:.2f} ms over {steps} steps")
    print("| phase | median ms | share of the step |")
    print("|---|---|---|")
    host = 0.0
    for label, values in per_phase.items():
        median = statistics.median(values)
        host += median if label in HOST_PHASES else 0.0
        print(f"| {label} | {median * 1e3:.3f} | {100 * median / step:.2f} % |")
    print(f"| host phases together (everything but forward, lm_head, sample) | {host * 1e3:.3f} | "
          f"{100 * host / step:.2f} % |")
    print(f"| scheduler (schedule + update_from_output) | "
          f"{(statistics.median(per_phase['schedule']) + statistics.median(per_phase['update_from_output'])) * 1e3:.3f}"
          f" | {100 * (statistics.median(per_phase['schedule']) + statistics.median(per_phase['update_from_output'])) / step:.2f} % |")


def sampler_rows_ab(rows_list: list[int], vocab: int, reps: int) -> None:
    """sample() of greedy rows on random float32 logits [rows, vocab], torch.argmax against greedy_argmax,
    interleaved call by call; the median of each and of the paired ratios."""
    import qwen_ops.model.sample.sampling as sampling
    from qwen_ops import SamplingParams

    after = sampling.greedy_argmax
    print(f"\nsample() of greedy rows, logits [rows, {vocab}] float32, median of {reps} interleaved calls")
    print("| rows | before (torch.argmax) ms | after (greedy_argmax) ms | median paired before/after |")
    print("|---|---|---|---|")
    for rows in rows_list:
        logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows))
        params = [SamplingParams(temperature=0, detokenize=False)] * rows
        generators = [torch.Generator().manual_seed(i) for i in range(rows)]
        times = {"before": [], "after": []}
        for _ in range(reps):
            for name, argmax in (("before", lambda x: x.argmax(dim=-1)), ("after", after)):
                sampling.greedy_argmax = argmax
                start = time.perf_counter()
                tokens, _ = sampling.sample(logits, params, generators)
                times[name].append(time.perf_counter() - start)
                sampling.greedy_argmax = after
                if tokens != logits.argmax(dim=-1).tolist():
                    raise SystemExit(f"{name}: other tokens than torch.argmax")
        ratio = statistics.median(b / a for b, a in zip(times["before"], times["after"]))
        print(f"| {rows} | {statistics.median(times['before']) * 1e3:.2f} | {statistics.median(times['after']) * 1e3:.2f} "
              f"| {ratio:.2f}x |", flush=True)


def sampler_ab(model, rounds: int) -> None:
    import qwen_ops.model.sample.sampling as sampling
    from bench_vs_transformers import WORKLOAD_A, engine_run, random_prompts

    after = sampling.greedy_argmax
    variants = {"before (torch.argmax)": lambda logits: logits.argmax(dim=-1), "after (greedy_argmax)": after}
    llm = make_llm(model, WORKLOAD_A["num_requests"])
    gen = torch.Generator().manual_seed(0)
    a = WORKLOAD_A
    lengths = torch.randint(a["min_prompt"], a["max_prompt"] + 1, (a["num_requests"],), generator=gen).tolist()
    prompts = random_prompts(gen, llm.config.vocab_size, lengths)
    print(f"\nworkload (a): {len(prompts)} requests, {sum(lengths)} prompt tokens, {a['new_tokens']} new tokens each")
    print("| round | variant | wall s | output tok/s | median decode step ms |")
    print("|---|---|---|---|---|")
    tps, tokens = collections.defaultdict(list), {}  # every run's tokens must equal the first run's
    for r in range(rounds):
        # ABBA order: a load that drifts during the run favours neither variant.
        for name, argmax in list(variants.items())[:: 1 if r % 2 == 0 else -1]:
            sampling.greedy_argmax = argmax
            try:
                out, wall, _, _, steps = engine_run(llm, prompts, a["new_tokens"])
            finally:
                sampling.greedy_argmax = after
            tps[name].append(sum(map(len, out)) / wall)
            if out != tokens.setdefault("first run", out):
                raise SystemExit(f"{name} gave other tokens: the variants are not comparable")
            print(f"| {r + 1} | {name} | {wall:.2f} | {tps[name][-1]:.2f} | {statistics.median(steps) * 1e3:.1f} |",
                  flush=True)
    before_name, after_name = variants
    ratios = [x / y for x, y in zip(tps[after_name], tps[before_name])]
    print(f"median output tok/s: before {statistics.median(tps[before_name]):.2f}, after "
          f"{statistics.median(tps[after_name]):.2f}; median paired after/before {statistics.median(ratios):.3f}x "
          f"(rounds: {', '.join(f'{x:.3f}' for x in ratios)}); same tokens: yes")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint dir (default: the built-in tiny model)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads first")
    p.add_argument("--phases", default="32", help="decode batch sizes for the phase table, comma separated ('' none)")
    p.add_argument("--context-tokens", type=int, default=64, help="prompt tokens of each request in the phase table")
    p.add_argument("--steps", type=int, default=15, help="timed decode steps per phase table")
    p.add_argument("--ab-rounds", type=int, default=0, help="rounds of the workload (a) sampler A/B (0: none)")
    p.add_argument("--sampler-rows", default="", help="sample() alone, before/after, at these row counts ('' none)")
    p.add_argument("--sampler-reps", type=int, default=21, help="interleaved calls per --sampler-rows entry")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from qwen_ops.model.loading.default_model import default_model_dir

    model = args.model or default_model_dir()
    load = os.getloadavg()
    print(f"model={model} threads={torch.get_num_threads()} load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for batch in [int(x) for x in args.phases.split(",") if x]:
        phase_table(model, batch, args.context_tokens, args.steps)
    if args.sampler_rows:
        with open(os.path.join(model, "config.json"), encoding="utf-8") as f:
            vocab = json.load(f)["vocab_size"]
        sampler_rows_ab([int(x) for x in args.sampler_rows.split(",")], vocab, args.sampler_reps)
    if args.ab_rounds:
        sampler_ab(model, args.ab_rounds)
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
