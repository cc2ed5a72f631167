"""Compare qwen_ops' scheduler with vLLM 0.33's, step by step, on random workloads.

Needs vLLM installed in the running interpreter (it is never a project dependency):

    python3 -m venv /work/vllm-venv && /work/vllm-venv/bin/pip install vllm==0.33.0
    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/scheduler/compare_vllm.py --workloads 500
    VLLM_TARGET_DEVICE=cpu /work/vllm-venv/bin/python bench/scheduler/compare_vllm.py --hybrid --workloads 500

Each step's record holds the batch (request ids and token counts, in order), the
preempted and finished ids, the free block count, every scheduled request's block
table (per KV cache group on a hybrid model) and cursor, the prefix hit of every
admitted request, the draft tokens scheduled, and what update_from_output returned.
--hybrid runs hybrid (GDN + attention) models: vLLM's KVCacheConfig with 1-3
MambaSpec groups before one FullAttentionSpec group, "align" mode with prefix
caching and "none" mode without. Exit status 1 if any workload differs.
"""

import argparse
import json
import random
import sys

from harness import OursDriver, VllmDriver, random_hybrid_workload, random_workload, run


def first_difference(ours, theirs):
    for step, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            keys = [k for k in a if a[k] != b.get(k)]
            return step, {k: {"qwen_ops": a[k], "vllm": b.get(k)} for k in keys}
    if len(ours) != len(theirs):
        return min(len(ours), len(theirs)), {"num_steps": {"qwen_ops": len(ours), "vllm": len(theirs)}}
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=200, help="random workloads to compare")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first workload")
    parser.add_argument("--max-steps", type=int, default=400, help="steps per workload at most")
    parser.add_argument("--stop-at-first", action="store_true", help="stop at the first difference")
    parser.add_argument("--hybrid", action="store_true", help="hybrid GDN + attention models")
    args = parser.parse_args()

    matched, differed, steps, vllm_failed = 0, [], 0, []
    features = {"prefix_caching": 0, "priority": 0, "spec": 0, "preempting": 0, "no_chunking": 0, "hits": 0}
    make_workload = random_hybrid_workload if args.hybrid else random_workload
    for seed in range(args.seed, args.seed + args.workloads):
        workload = make_workload(random.Random(seed))
        ours = run(OursDriver(workload.config), workload, args.max_steps)
        try:
            theirs = run(VllmDriver(workload.config), workload, args.max_steps)
        except Exception as error:  # vLLM's own assertions: not comparable
            vllm_failed.append((seed, f"{type(error).__name__}: {error}"))
            print(f"seed {seed}: vLLM raised {type(error).__name__}: {error}")
            continue
        difference = first_difference(ours, theirs)
        steps += len(ours)
        if difference is None:
            matched += 1
            cfg = workload.config
            features["prefix_caching"] += cfg["enable_prefix_caching"]
            features["priority"] += cfg["policy"] == "priority"
            features["spec"] += cfg["num_speculative_tokens"] > 0
            features["no_chunking"] += not cfg["enable_chunked_prefill"]
            features["preempting"] += any(r["preempted"] for r in ours)
            features["hits"] += any(any(r["hits"].values()) for r in ours)
        else:
            step, detail = difference
            differed.append(seed)
            print(f"seed {seed}: first difference at step {step}")
            print("  config:", json.dumps(workload.config))
            print("  ", json.dumps(detail)[:2000])
            if args.stop_at_first:
                break
    total = matched + len(differed)
    print(f"{matched}/{total} compared workloads identical to vLLM 0.33 ({steps} steps of qwen_ops compared)")
    print("identical workloads with:", ", ".join(f"{k}={v}" for k, v in features.items()))
    if differed:
        print("differing seeds:", differed[:50])
    if vllm_failed:
        print(f"{len(vllm_failed)} workloads not compared because vLLM itself raised:")
        for seed, error in vllm_failed[:20]:
            print(f"  seed {seed}: {error}")
    sys.exit(1 if differed else 0)


if __name__ == "__main__":
    main()
