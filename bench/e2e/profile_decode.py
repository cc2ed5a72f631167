"""Where a decode step of the engine spends its time (torch.profiler), at given batch sizes.

    python bench/e2e/profile_decode.py --model /tmp/q08b --batch-sizes 1,8 --steps 4

Each batch: that many 32-token requests are prefilled, then ``--steps`` decode steps
run under torch.profiler. Prints the median step time, the top ops by self CPU time,
and the share of the step not inside any profiled torch op (host-side Python).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def profile_batch(llm, batch: int, steps: int, top: int) -> None:
    from qwen_ops import SamplingParams

    params = SamplingParams(max_tokens=steps + 4, temperature=0, ignore_eos=True, detokenize=False)
    gen = torch.Generator().manual_seed(batch)
    for _ in range(batch):
        llm.add_request(torch.randint(1, 100000, (32,), generator=gen).tolist(), params)
    while not llm.step_stats or llm.step_stats[-1].num_prefills or llm.step_stats[-1].num_decodes < batch:
        llm.step()  # prefill until every request decodes
    llm.step()  # one decode step outside the profile (first-touch of the decode path)
    times = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            llm.step()
            times.append(time.perf_counter() - t0)
    while llm.has_unfinished_requests():
        llm.step()
    step = statistics.median(times)
    events = prof.key_averages()
    in_ops = sum(e.self_cpu_time_total for e in events) / 1e6 / steps
    print(f"\n## batch {batch}: median decode step {1e3 * step:.1f} ms over {steps} profiled steps "
          f"(load average {os.getloadavg()[0]:.1f}); time inside torch ops {1e3 * in_ops:.1f} ms/step, "
          f"outside (host Python and profiler) {1e3 * (sum(times) / steps - in_ops):.1f} ms/step")
    print(events.table(sort_by="self_cpu_time_total", row_limit=top))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch-sizes", default="1,8")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from qwen_ops import LLM

    sizes = [int(x) for x in args.batch_sizes.split(",")]
    llm = LLM(args.model, dtype=args.dtype, max_num_seqs=max(sizes), max_model_len=256)
    print(f"model={llm.model_dir} dtype={args.dtype} threads={torch.get_num_threads()}")
    for b in sizes:
        profile_batch(llm, b, args.steps, args.top)


if __name__ == "__main__":
    main()
