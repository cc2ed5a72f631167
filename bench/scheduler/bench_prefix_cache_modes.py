"""Hybrid prefix caching, "chunk" mode against vLLM's "align" mode, on shared prefixes of 70-520 tokens served twice.

Scheduler-level (no model runs: the hits, the chunking and the cache's memory are the
scheduler's decisions): 8 prefixes of 70-520 tokens, each shared by 3 prompts with their
own 24-token tails, served once (pass 1) and then again (pass 2). Per mode: the block
size, the second pass's hit tokens against what a 64-token granularity allows (the
last 64-token boundary before each prompt's last token), the hit stop reasons, and the
bytes of GDN state and attention KV the cache holds after pass 1, at Qwen3.5-0.8B's
proportions (18 GDN layers of 16 x 128 x 128 float32 recurrent state plus a 3 x 6144
conv tail; 6 attention layers of 2 KV heads x 256, bfloat16).

    python bench/scheduler/bench_prefix_cache_modes.py [--checkpoints 256] [--seed 0]

Align mode's block size is the page rule's: 544 with the float32 state this engine keeps,
288 with vLLM's default bfloat16 state (both rows). Time to first token needs the engine
and is not measured here.
"""

import argparse
import random
import time

from harness import load_ours

GDN_LAYERS, ATTENTION_LAYERS = 18, 6
RECURRENT_BYTES = 16 * 128 * 128 * 4
CONV_BYTES = 3 * (2 * 16 * 128 + 16 * 128) * 2
CHECKPOINT_BYTES = GDN_LAYERS * (RECURRENT_BYTES + CONV_BYTES)  # every GDN layer's state at one boundary
KV_BYTES_PER_TOKEN = ATTENTION_LAYERS * 2 * 2 * 256 * 2
GROUPS = GDN_LAYERS // ATTENTION_LAYERS
GRANULARITY = 64


def workload(seed: int):
    rng = random.Random(seed)
    lengths = [70 + round(i * (520 - 70) / 7) for i in range(8)]
    prompts = []
    for n, length in enumerate(lengths):
        prefix = [rng.randrange(1, 50000) for _ in range(length)]
        for tail in range(3):
            prompts.append(prefix + [rng.randrange(1, 50000) for _ in range(24)])
    return prompts


def serve(scheduling, scheduler, prompts, tag):
    """Admit all prompts, run to the end; returns {request id: (hit tokens, reason)}."""
    for i, tokens in enumerate(prompts):
        scheduler.add_request(scheduling.Request(f"{tag}{i}", tokens, 4))
    hits = {}
    while scheduler.has_unfinished_requests():
        out = scheduler.schedule()
        for request_id, hit in out.num_cached_tokens.items():
            hits.setdefault(request_id, (hit, out.prefix_hit_reasons.get(request_id, "")))
        scheduler.update_from_output(out, {r: [1] for r in out.sampling_req_ids})
    return hits


def run_mode(scheduling, prompts, mode: str, block_size: int, checkpoints: int):
    page_bytes = block_size * KV_BYTES_PER_TOKEN // ATTENTION_LAYERS  # one attention layer's page of the pool
    pool_blocks = 6000
    config = scheduling.SchedulerConfig(
        max_num_batched_tokens=2048, max_num_seqs=8, block_size=block_size, num_blocks=pool_blocks,
        max_model_len=1024, enable_prefix_caching=True, num_gdn_groups=GROUPS, mamba_cache_mode=mode,
        num_gdn_checkpoints=checkpoints if mode == "chunk" else 0)
    scheduler = scheduling.Scheduler(config)
    started = time.perf_counter()
    serve(scheduling, scheduler, prompts, "first")
    pool = scheduler.kv_cache.pool
    attention_key = bytes((GROUPS,))
    cached_attention = sum(1 for key in pool.cached if key.endswith(attention_key))
    cached_gdn_pages = sum(1 for key in pool.cached if not key.endswith(attention_key))
    hits = serve(scheduling, scheduler, prompts, "second")
    elapsed = time.perf_counter() - started
    allowed = sum((len(p) - 1) // GRANULARITY * GRANULARITY for p in prompts)
    hit_tokens = sum(h for h, _ in hits.values())
    reasons = {}
    for _, reason in hits.values():
        reasons[reason] = reasons.get(reason, 0) + 1
    if mode == "chunk":
        gdn_bytes = len(scheduler.kv_cache.checkpoints) * CHECKPOINT_BYTES
    else:  # a cached GDN page holds one group's layers' states, padded to the attention page
        gdn_bytes = cached_gdn_pages * ATTENTION_LAYERS * max(page_bytes, RECURRENT_BYTES + CONV_BYTES)
    kv_bytes = cached_attention * block_size * KV_BYTES_PER_TOKEN
    return dict(mode=mode, block_size=block_size, hit_tokens=hit_tokens, allowed=allowed, reasons=reasons,
                gdn_mib=gdn_bytes / 2**20, kv_mib=kv_bytes / 2**20, seconds=elapsed)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=int, default=256, help="chunk mode's checkpoint pool slots")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scheduling = load_ours()
    prompts = workload(args.seed)
    print(f"{len(prompts)} prompts, prefixes 70-520 tokens + 24-token tails, served twice; "
          f"checkpoint = {CHECKPOINT_BYTES / 2**20:.1f} MiB, KV of 64 tokens = {64 * KV_BYTES_PER_TOKEN / 2**20:.2f} MiB")
    rows = [run_mode(scheduling, prompts, "chunk", 16, args.checkpoints),
            run_mode(scheduling, prompts, "chunk", 16, 8),
            run_mode(scheduling, prompts, "align", 544, 0),
            run_mode(scheduling, prompts, "align", 288, 0)]
    print(f"{'mode':<6} {'block':>5} {'ckpt slots':>10} {'pass-2 hit tokens':>17} {'of 64-granular':>14} "
          f"{'%':>6} {'GDN state MiB':>13} {'KV MiB':>7}  hit stop reasons")
    for row, slots in zip(rows, (args.checkpoints, 8, "-", "-")):
        print(f"{row['mode']:<6} {row['block_size']:>5} {slots:>10} {row['hit_tokens']:>17} {row['allowed']:>14} "
              f"{100 * row['hit_tokens'] / row['allowed']:>6.1f} {row['gdn_mib']:>13.1f} {row['kv_mib']:>7.1f}  "
              + ", ".join(f"{k}={v}" for k, v in sorted(row["reasons"].items())))


if __name__ == "__main__":
    main()
