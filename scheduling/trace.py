"""Replay a workload through the scheduler and print what every step does.

    python -m qwen_ops.scheduling.trace --decoding 4 --prompts 12 --outputs 3 --budget 6

One line per step: what each request got (a decode token or a prefill chunk), the
budget used, free blocks, preemptions and the attention state. A newly admitted
request's prefix-cache hit shows as "hit N"; on a hybrid model with prefix caching
(--gdn-groups with --prefix-caching: vLLM's align mode) a chunk clipped to end on a
block boundary shows as "aligned". --plot FILE.png draws the same as a stacked bar
chart. Sampled tokens are dummies (never EOS), so requests stop at their output length.
"""

import argparse
import sys

from .config import SchedulerConfig
from .request import Request
from .scheduler import Scheduler
from .step_metadata import build_step_metadata


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _broadcast(name: str, values: list[int], count: int) -> list[int]:
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise ValueError(f"--{name} needs 1 or {count} values, got {len(values)}")
    return values


def _check_args(p: argparse.ArgumentParser, args) -> None:
    """Refuse what would otherwise be dropped silently (p.error() prints `error: ...` and exits 2)."""
    if not args.prompts:
        p.error("--prompts needs at least one prompt length")
    for name in ("prompts", "outputs", "arrivals", "decoding"):
        if any(v < 1 for v in getattr(args, name)):
            p.error(f"--{name} values must be >= 1, got {getattr(args, name)}")
    if args.shared_prefix < 0 or args.gdn_groups < 0:
        p.error("--shared-prefix and --gdn-groups must be >= 0")
    if args.max_steps < 1:
        p.error(f"--max-steps must be >= 1, got {args.max_steps}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m qwen_ops.scheduling.trace", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=_int_list, required=True, help="prompt lengths, e.g. 12,30")
    p.add_argument("--outputs", type=_int_list, default=[4], help="output lengths (one value or one per prompt)")
    p.add_argument("--arrivals", type=_int_list, default=[1], help="step at which each prompt arrives (from 1)")
    p.add_argument("--priorities", type=_int_list, default=[0], help="priority of each prompt (priority policy)")
    p.add_argument("--decoding", type=_int_list, default=[], help="context lengths of requests already decoding at step 1")
    p.add_argument("--decode-outputs", type=int, default=8, help="output length of those decoding requests")
    p.add_argument("--budget", type=int, required=True, help="max_num_batched_tokens")
    p.add_argument("--max-num-seqs", type=int, default=None, help="default: min(8, budget)")
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--blocks", type=int, default=64, help="num_blocks, null block included")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--policy", choices=["fcfs", "priority"], default="fcfs")
    p.add_argument("--long-prefill-threshold", type=int, default=0)
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--prefix-caching", action="store_true")
    p.add_argument("--shared-prefix", type=int, default=0,
                   help="the prompts' first N tokens are the same (prefix-cache hits)")
    p.add_argument("--gdn-groups", type=int, default=0,
                   help="GDN KV cache groups of a hybrid model (3 for Qwen3.5; 0: attention only)")
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--plot", metavar="FILE.png", help="also draw the steps as a stacked bar chart")
    args = p.parse_args(argv)
    _check_args(p, args)
    return args


def replay(args) -> tuple[Scheduler, list[dict]]:
    """Run the workload; returns the scheduler and one record per traced step."""
    if args.max_num_seqs is None:
        args.max_num_seqs = min(8, args.budget)
    config = SchedulerConfig(
        max_num_batched_tokens=args.budget, max_num_seqs=args.max_num_seqs, block_size=args.block_size,
        num_blocks=args.blocks, max_model_len=args.max_model_len,
        enable_chunked_prefill=not args.no_chunked_prefill, enable_prefix_caching=args.prefix_caching,
        policy=args.policy, long_prefill_token_threshold=args.long_prefill_threshold,
        num_gdn_groups=args.gdn_groups,
    )
    scheduler = Scheduler(config)
    n = len(args.prompts)
    outputs = _broadcast("outputs", args.outputs, n)
    arrivals = _broadcast("arrivals", args.arrivals, n)
    priorities = _broadcast("priorities", args.priorities, n)

    # Requests "already decoding": prefill them before step 1, untraced.
    for i, length in enumerate(args.decoding):
        scheduler.add_request(Request(f"d{i}", [1] * length, args.decode_outputs, arrival_time=-1.0 + i * 1e-3))
    while any(r.num_output_tokens == 0 for r in scheduler.requests.values()):
        out = scheduler.schedule()
        if not out.total_num_scheduled_tokens:
            raise ValueError("the --decoding requests do not fit in the KV blocks")
        scheduler.update_from_output(out, {r: [1] for r in out.sampling_req_ids})

    records = []
    letters = [chr(ord("a") + i) if i < 26 else f"p{i}" for i in range(n)]
    for step in range(1, args.max_steps + 1):
        for i in range(n):
            if arrivals[i] == step:
                length, shared = args.prompts[i], min(args.shared_prefix, args.prompts[i])
                scheduler.add_request(
                    Request(letters[i], [1] * shared + [2 + i] * (length - shared), outputs[i],
                            arrival_time=float(step) + i * 1e-3, priority=priorities[i])
                )
        if not scheduler.has_unfinished_requests() and all(a <= step for a in arrivals):
            break
        out = scheduler.schedule()
        if out.total_num_scheduled_tokens:
            meta = build_step_metadata(out)
            attn_state = meta.attn_state.name
        else:
            attn_state = "-"
        rows = []
        for rid, num in out.num_scheduled_tokens.items():
            request = scheduler.requests[rid]
            computed = out.num_computed_tokens[rid]  # cursor before the step, after any prefix-cache hit
            kind = "decode" if computed >= request.num_prompt_tokens and num == 1 else "prefill"
            reached = computed + num
            notes = []
            if out.num_cached_tokens.get(rid):
                notes.append(f"hit {out.num_cached_tokens[rid]}")
            if scheduler.align_gdn_chunks and kind == "prefill" and reached < request.num_tokens \
                    and reached % args.block_size == 0:
                notes.append("aligned")
            rows.append((rid, kind, num, reached, request.num_tokens, " ".join(notes)))
        records.append(dict(step=step, rows=rows, used=out.total_num_scheduled_tokens, free=out.num_free_blocks,
                            preempted=sorted(out.preempted_req_ids), attn_state=attn_state))
        scheduler.update_from_output(out, {r: [1] for r in out.sampling_req_ids})
    return scheduler, records


def format_record(record: dict, budget: int) -> str:
    """One step as a line of text."""
    parts = []
    for rid, kind, num, reached, total, notes in record["rows"]:
        if kind == "decode":
            parts.append(f"{rid}: decode {num}")
        else:
            parts.append(f"{rid}: prefill {num} ({reached}/{total})" + (f" {notes}" if notes else ""))
    batch = ", ".join(parts) or "(nothing scheduled)"
    preempted = ",".join(record["preempted"]) or "-"
    return (f"step {record['step']:>3} | {batch} | budget {record['used']}/{budget} | "
            f"free blocks {record['free']} | preempted {preempted} | {record['attn_state']}")


def plot(records: list[dict], budget: int, path: str) -> None:
    """Stacked bar per step: one segment per request, hatched for prefill chunks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    request_ids = sorted({row[0] for r in records for row in r["rows"]})
    colors = {rid: plt.cm.tab20(i % 20) for i, rid in enumerate(request_ids)}
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(records) + 2), 4))
    for record in records:
        bottom = 0
        for rid, kind, num, *_ in record["rows"]:
            ax.bar(record["step"], num, bottom=bottom, color=colors[rid], edgecolor="black", linewidth=0.5,
                   hatch="//" if kind == "prefill" else None)
            if num >= 1:
                ax.text(record["step"], bottom + num / 2, rid, ha="center", va="center", fontsize=7)
            bottom += num
        if record["preempted"]:
            ax.text(record["step"], bottom + 0.2, "preempt " + ",".join(record["preempted"]), ha="center",
                    va="bottom", fontsize=6, color="red", rotation=90)
    ax.axhline(budget, color="gray", linestyle="--", linewidth=1, label=f"budget {budget}")
    ax.set_xlabel("step")
    ax.set_ylabel("scheduled tokens (hatched: prefill chunk)")
    ax.set_xticks([r["step"] for r in records])
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        scheduler, records = replay(args)
    except (ValueError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    hybrid = (f" gdn_groups={args.gdn_groups} gdn_mode={'align' if scheduler.align_gdn_chunks else 'none'}"
              if args.gdn_groups else "")
    print(f"qwen_ops scheduler: max_num_batched_tokens={args.budget} max_num_seqs={args.max_num_seqs} "
          f"block_size={args.block_size} usable_blocks={args.blocks - 1} policy={args.policy}{hybrid}")
    for record in records:
        print(format_record(record, args.budget))
    if scheduler.has_unfinished_requests() or max(args.arrivals) > args.max_steps:
        print(f"note: stopped at --max-steps {args.max_steps} before every request finished", file=sys.stderr)
    if args.plot:
        try:
            plot(records, args.budget, args.plot)
        except (OSError, ValueError) as error:  # bad folder, unknown extension
            print(f"error: cannot write --plot {args.plot}: {error}", file=sys.stderr)
            return 2
        print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
