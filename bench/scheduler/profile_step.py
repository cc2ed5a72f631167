"""Instruction counts (callgrind) or wall-clock of one scheduler step, or of build_step_metadata.

Wall-clock medians are noisy on a shared machine; callgrind instruction counts are
repeatable under load. Only the measured loop runs inside itertools.starmap, so
callgrind can collect just that (setup, imports and prefills are not counted):

    valgrind --tool=callgrind --toggle-collect=starmap_next --callgrind-out-file=/tmp/cg.out \\
        /work/venv/bin/python bench/scheduler/profile_step.py --what step --size 1024 --reps 10
    # instructions per call = the "Collected" total that valgrind prints / --reps

    /work/venv/bin/python bench/scheduler/profile_step.py --what metadata --size 1024 --time   # wall-clock

--what step: schedule() + update_from_output() of a decode step (the workload of
bench_scheduler.py: 512-token prompts, block size 128, prefix caching; every request
decodes one token; --gdn-groups G for a hybrid model, --no-prefix-caching for none mode). --what metadata / metadata-reference: build_step_metadata of
such a decode step, or the per-row implementation it replaced (kept as the test
oracle in tests/scheduling/step_metadata_reference.py). --package-dir loads another
copy of the scheduling package (e.g. `git archive HEAD scheduling | tar -x -C /tmp/before`)
to measure the code before a change. --vllm counts vLLM 0.33's scheduler on the same step
(`VLLM_TARGET_DEVICE=cpu valgrind ... /work/vllm-venv/bin/python bench/scheduler/profile_step.py ... --vllm`).
"""

import argparse
import gc
import importlib.util
import itertools
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_package(directory: str):
    """Import `directory` as qwen_ops.scheduling (before harness imports the installed one)."""
    import qwen_ops  # noqa: F401  (the parent package)

    spec = importlib.util.spec_from_file_location(
        "qwen_ops.scheduling", Path(directory) / "__init__.py", submodule_search_locations=[directory]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["qwen_ops.scheduling"] = module
    spec.loader.exec_module(module)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--what", choices=["step", "schedule", "update", "metadata", "metadata-reference"],
                        default="step", help="schedule / update: only that half of a step is measured")
    parser.add_argument("--size", type=int, default=1024, help="running requests")
    parser.add_argument("--reps", type=int, default=10, help="measured calls")
    parser.add_argument("--warmup", type=int, default=0, help="decode steps run before the measured ones")
    parser.add_argument("--time", action="store_true", help="print the wall-clock median per call")
    parser.add_argument("--package-dir", help="measure this copy of the scheduling package instead")
    parser.add_argument("--gdn-groups", type=int, default=0, help="GDN groups of a hybrid model (0: attention only)")
    parser.add_argument("--no-prefix-caching", action="store_true", help="prefix caching off (hybrid: none mode)")
    parser.add_argument("--vllm", action="store_true",
                        help="--what step of vLLM 0.33's scheduler instead (run with the vLLM venv's python); "
                             "its ModelRunnerOutput is built outside the measured calls")
    args = parser.parse_args()
    if args.package_dir:
        load_package(args.package_dir)
    sys.path.insert(0, str(HERE))
    from harness import OursDriver, VllmDriver, decode_workload, model_token

    workload = decode_workload(args.size, gdn_groups=args.gdn_groups, prefix_caching=not args.no_prefix_caching)
    if args.vllm:
        if args.what != "step":
            parser.error("--vllm measures --what step only")
        return measure_vllm(VllmDriver(workload.config), workload, args.reps, model_token)
    driver = OursDriver(workload.config)
    for spec in workload.requests:
        driver.add(spec, arrival_time=int(spec.request_id[1:]) * 1e-6)
    scheduler = driver.scheduler
    while any(r.num_output_tokens == 0 for r in scheduler.requests.values()):  # prefills
        out = scheduler.schedule()
        scheduler.update_from_output(out, {r: [1] for r in out.sampling_req_ids})

    if args.what in ("step", "schedule", "update"):
        sampled = {r.request_id: [7] for r in scheduler.running}  # every request decodes
        for _ in range(args.warmup):  # e.g. past the first decode steps' GDN page moves (align mode)
            scheduler.update_from_output(scheduler.schedule(), sampled)
        outputs = []  # the other half of a step runs outside the measured call
        if args.what == "step":
            def call():
                scheduler.update_from_output(scheduler.schedule(), sampled)
        elif args.what == "schedule":
            def call():
                outputs.append(scheduler.schedule())
        else:
            def call():
                scheduler.update_from_output(outputs.pop(), sampled)
    else:
        if args.what == "metadata":
            from qwen_ops.scheduling import build_step_metadata as build
        else:
            sys.path.insert(0, str(HERE.parents[1] / "tests" / "scheduling"))
            from step_metadata_reference import reference_build_step_metadata as build
        out = scheduler.schedule()

        def call():
            build(out)

    times = []

    def timed():
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)

    for _ in range(args.reps):
        # As bench_scheduler.py does: collect before each call, so that a full
        # collection of the whole heap (torch's objects included) does not land in
        # one measured call and not in another. Collected: only inside starmap.
        if args.what == "update":
            outputs.append(scheduler.schedule())
        gc.collect()
        for _ in itertools.starmap(timed if args.time else call, [()]):
            pass
        if args.what == "schedule":
            scheduler.update_from_output(outputs.pop(), sampled)
    if args.time:
        print(f"{args.what} size={args.size}: median {statistics.median(times) * 1e6:.0f} us over {args.reps} calls")


def measure_vllm(driver, workload, reps: int, model_token) -> None:
    """vLLM's schedule() and update_from_output() of a decode step, each inside its own starmap."""
    from vllm.v1.outputs import ModelRunnerOutput

    for spec in workload.requests:
        driver.add(spec, arrival_time=int(spec.request_id[1:]) * 1e-6)
    scheduler = driver.scheduler
    while any(r.num_output_tokens == 0 for r in scheduler.requests.values()):  # prefills
        out, _, sampling = driver.schedule()
        driver.update(out, {r: [model_token(r, 0)] for r in sampling})
    for _ in range(reps):
        gc.collect()
        for out in itertools.starmap(scheduler.schedule, [()]):
            pass
        ids = list(out.num_scheduled_tokens)
        sampled = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                    sampled_token_ids=[[7]] * len(ids), logprobs=None,
                                    prompt_logprobs_dict={}, pooler_output=[])
        for _ in itertools.starmap(scheduler.update_from_output, [(out, sampled)]):
            pass


if __name__ == "__main__":
    main()
