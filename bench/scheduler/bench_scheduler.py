"""Time schedule() + update_from_output() per step with 256 and 1024 running decodes.

    python bench/scheduler/bench_scheduler.py                    # qwen_ops only
    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/scheduler/bench_scheduler.py   # side by side
    ... bench_scheduler.py --gdn-groups 3                        # a hybrid model (Qwen3.5's 3 GDN groups)

Every request has a 512-token prompt (block size 128, prefix caching on, as vLLM
defaults); after the prefills, each timed step decodes one token for every
request. Scheduling overhead is time the device waits, so lower is better.
Before timing, both schedulers replay the same steps and their decisions are
compared (vLLM only when it is importable).
"""

import argparse
import gc
import statistics
import time

from harness import OursDriver, VllmDriver, decode_workload, model_token, run


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
    args = parser.parse_args()
    with_vllm = vllm_available()
    sizes = [int(x) for x in args.sizes.split(",")]

    if with_vllm:
        for n in sizes:  # same decisions first (short replay, untimed)
            workload = decode_workload(n, gdn_groups=args.gdn_groups)
            ours, theirs = run(OursDriver(workload.config), workload, 40), run(VllmDriver(workload.config), workload, 40)
            same = ours == theirs
            print(f"{n} requests: first 40 steps identical to vLLM: {same}")
            if not same:
                raise SystemExit("decisions differ: timings would not be comparable")

    rows = []
    for n in sizes:
        workload = decode_workload(n, gdn_groups=args.gdn_groups)
        ours = time_steps(OursDriver(workload.config), workload, args.steps)
        theirs = (time_steps(VllmDriver(workload.config), decode_workload(n, gdn_groups=args.gdn_groups), args.steps)
                  if with_vllm else None)
        rows.append((n, ours, theirs))

    print(f"\nmedian per step over {args.steps} decode steps (microseconds)")
    header = "| running | qwen_ops schedule | qwen_ops update | qwen_ops total |"
    if with_vllm:
        header += " vLLM schedule | vLLM update | vLLM total | speedup |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for n, (s, u), theirs in rows:
        line = f"| {n} | {s * 1e6:.0f} | {u * 1e6:.0f} | {(s + u) * 1e6:.0f} |"
        if theirs:
            vs, vu = theirs
            line += f" {vs * 1e6:.0f} | {vu * 1e6:.0f} | {(vs + vu) * 1e6:.0f} | {(vs + vu) / (s + u):.1f}x |"
        print(line)


if __name__ == "__main__":
    main()
