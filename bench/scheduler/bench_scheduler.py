"""Time schedule() + update_from_output() per step with 256 and 1024 running decodes.

    python bench/scheduler/bench_scheduler.py                    # qwen_ops only
    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/scheduler/bench_scheduler.py   # side by side
    ... bench_scheduler.py --gdn-groups 3                        # a hybrid model (Qwen3.5's 3 GDN groups)
    ... bench_scheduler.py --gdn-groups 3 --no-prefix-caching    # hybrid, "none" mode
    git archive BASE scheduling | tar -x -C /tmp/before         # then, before/after in one run:
    ... bench_scheduler.py --baseline /tmp/before/scheduling --rounds 5

Every request has a 512-token prompt (block size 128, prefix caching on, as vLLM
defaults); after the prefills, each timed step decodes one token for every
request. Scheduling overhead is time the device waits, so lower is better.
Before timing, both schedulers replay the same steps and their decisions are
compared (vLLM only when it is importable). --baseline times another copy of the
scheduling package (the code before a change) in the same process; --rounds repeats
every measurement, alternating the schedulers, and reports the median of the rounds
and of the paired per-round ratios (what to trust on a shared machine).
"""

import argparse
import gc
import statistics
import time

from harness import OursDriver, VllmDriver, decode_workload, load_package_copy, model_token, run


def vllm_available() -> bool:
    try:
        import vllm.v1.core.sched.scheduler  # noqa: F401
    except ImportError:
        return False
    return True


def time_steps(driver, workload, num_steps):
    """Prefill everything untimed, then time num_steps decode steps; returns seconds per step."""
    for spec in workload.requests:
        driver.add(spec, arrival_time=int(spec.request_id[1:]) * 1e-6)
    n = len(workload.requests)
    while any(r.num_output_tokens == 0 for r in driver.scheduler.requests.values()):  # prefills, untimed
        out, _, sampling = driver.schedule()
        driver.update(out, {r: [model_token(r, 0)] for r in sampling})
    schedule_s, update_s = [], []
    scheduler = driver.scheduler
    for _ in range(num_steps):
        gc.collect()
        t0 = time.perf_counter()
        out = scheduler.schedule()
        t1 = time.perf_counter()
        assert len(out.num_scheduled_tokens) == n
        sampled = {r: [7] for r in out.num_scheduled_tokens}
        if isinstance(driver, VllmDriver):
            from vllm.v1.outputs import ModelRunnerOutput

            ids = list(out.num_scheduled_tokens)
            sampled = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                        sampled_token_ids=[[7]] * len(ids), logprobs=None,
                                        prompt_logprobs_dict={}, pooler_output=[])
        t2 = time.perf_counter()
        scheduler.update_from_output(out, sampled)
        t3 = time.perf_counter()
        schedule_s.append(t1 - t0)
        update_s.append(t3 - t2)
    return statistics.median(schedule_s), statistics.median(update_s)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="timed decode steps per run")
    parser.add_argument("--sizes", default="256,1024", help="numbers of running requests")
    parser.add_argument("--gdn-groups", type=int, default=0, help="GDN groups of a hybrid model (0: attention only)")
    parser.add_argument("--no-prefix-caching", action="store_true", help="prefix caching off (hybrid: none mode)")
    parser.add_argument("--baseline", metavar="DIR", help="another copy of the scheduling package to time beside it")
    parser.add_argument("--rounds", type=int, default=1, help="repeat each measurement, alternating schedulers")
    parser.add_argument("--no-vllm", action="store_true", help="skip vLLM even when it is importable")
    args = parser.parse_args()
    if args.steps + 45 > 600:
        parser.error("--steps must leave the requests running: at most 555 (decode_workload's max_tokens is 600)")
    with_vllm = not args.no_vllm and vllm_available()
    sizes = [int(x) for x in args.sizes.split(",")]
    baseline = load_package_copy(args.baseline) if args.baseline else None

    def workload_of(n):
        return decode_workload(n, gdn_groups=args.gdn_groups, prefix_caching=not args.no_prefix_caching)

    drivers = {"qwen_ops": lambda config: OursDriver(config)}
    if baseline is not None:
        drivers["baseline"] = lambda config: OursDriver(config, baseline)
    if with_vllm:
        drivers["vLLM"] = VllmDriver
    for n in sizes:  # same decisions first (short replay, untimed)
        traces = {name: run(make(workload_of(n).config), workload_of(n), 40) for name, make in drivers.items()}
        same = all(trace == traces["qwen_ops"] for trace in traces.values())
        print(f"{n} requests: first 40 steps identical ({', '.join(traces)}): {same}", flush=True)
        if not same:
            raise SystemExit("decisions differ: timings would not be comparable")

    print(f"\nmedian per step over {args.steps} decode steps (microseconds), gdn_groups={args.gdn_groups}, "
          f"prefix caching {'off' if args.no_prefix_caching else 'on'}; {args.rounds} round(s)", flush=True)
    names = list(drivers)
    header = "| running | round | " + " | ".join(f"{name} schedule | {name} update | {name} total" for name in names)
    others = names[1:]
    header += "".join(f" | {name} / qwen_ops" for name in others) + " |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for n in sizes:
        totals = {name: [] for name in names}
        for r in range(args.rounds):
            line = f"| {n} | {r + 1} |"
            for name in names:
                workload = workload_of(n)
                s, u = time_steps(drivers[name](workload.config), workload, args.steps)
                totals[name].append(s + u)
                line += f" {s * 1e6:.0f} | {u * 1e6:.0f} | {(s + u) * 1e6:.0f} |"
            line += "".join(f" {totals[o][-1] / totals['qwen_ops'][-1]:.2f}x |" for o in others)
            print(line, flush=True)
        if args.rounds > 1:
            line = f"| {n} | median |" + "".join(
                f" | | {statistics.median(totals[name]) * 1e6:.0f} |" for name in names)
            line += "".join(
                f" {statistics.median(t / q for t, q in zip(totals[o], totals['qwen_ops'])):.2f}x |" for o in others)
            print(line, flush=True)


if __name__ == "__main__":
    main()
