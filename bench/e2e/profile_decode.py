"""Where a decode step of the engine spends its time (torch.profiler), at given batch sizes.

    python bench/e2e/profile_decode.py --model /tmp/q08b --batch-sizes 1,8 --steps 4
    python bench/e2e/profile_decode.py --model /tmp/pl-q08b --batch-sizes 1 --prompt-len 512 --breakdown

Each batch: that many ``--prompt-len``-token requests are prefilled, then ``--steps`` decode steps
run under torch.profiler. Prints the median step time, the top ops by self CPU time, and the
share of the step not inside any profiled torch op (host-side Python).

``--breakdown`` also labels the model's parts (each layer's mixer and MLP, the norms, the logits,
sampling, the step-input building) with ``record_function`` and prints, per part, its wall time per
step, the time inside its top-level torch ops, split into the projections (``small_m_linear`` /
``F.linear``) and the rest, and what is left (Python and dispatch). The labels are added by
wrapping the model's functions in this script only; the library is not changed.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import os
import statistics
import time

import torch

# Top-level ops that are the projections: the small-M kernel, the INT8 kernels, or F.linear's matmuls.
PROJECTION_OPS = ("qwen_ops::small_m_linear", "qwen_ops::weight_only_int8_linear", "qwen_ops::int8_linear",
                  "aten::linear", "aten::addmm", "aten::mm", "aten::matmul")


def _labelled(label, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)
    return wrapper


@contextlib.contextmanager
def labelled_model_parts():
    """Wrap the model's parts in ``record_function`` labels (``part:...``) for the breakdown; undone on exit."""
    from qwen_ops.model.network import attention, dense_mlp, gdn, qwen3_5
    from qwen_ops.model.worker import model_runner

    patches = [
        (attention.FullAttention, "forward", "part:attention layer"),
        (gdn.GatedDeltaNet, "forward", "part:gdn layer"),
        (dense_mlp.DenseMLP, "__call__", "part:mlp"),
        (qwen3_5, "rms_norm_scaled", "part:decoder norms"),
        (qwen3_5, "rope_cos_sin", "part:rope cos/sin"),
        (qwen3_5.Qwen35ForCausalLM, "compute_logits", "part:logits (lm_head)"),
        (qwen3_5.Qwen35ForCausalLM, "greedy_tokens", "part:greedy tokens (lm_head + argmax)"),
        (model_runner, "sample", "part:sampling"),
        (model_runner.StepInputs, "build", "part:step inputs"),
        (model_runner.ModelRunner, "_forward", "part:forward (all layers)"),
    ]
    saved = []
    for owner, name, label in patches:
        if name not in owner.__dict__:  # a part this tree does not have
            continue
        original = owner.__dict__[name]
        fn = original.__func__ if isinstance(original, classmethod) else original
        wrapped = _labelled(label, fn)
        setattr(owner, name, classmethod(wrapped) if isinstance(original, classmethod) else wrapped)
        saved.append((owner, name, original))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def breakdown(prof, steps: int, step_ms: float) -> None:
    """Per labelled part: wall, inside projections, inside other top-level ops, Python/dispatch (ms per step)."""
    events = prof.events()
    parts = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])  # label -> [wall us, proj us, ops us, calls]
    op_totals = collections.Counter()  # top-level op name (within any part) -> us
    proj_shapes = collections.Counter()

    def part_of(e):
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("part:"):
                return p
            p = p.cpu_parent
        return None

    nested = collections.Counter()  # label -> wall us of the parts inside it
    for e in events:
        if e.name.startswith("part:"):
            parts[e.name][0] += e.cpu_time_total
            parts[e.name][3] += 1
            outer = part_of(e)
            if outer is not None:
                nested[outer.name] += e.cpu_time_total
            continue
        parent = part_of(e)
        if parent is None:
            continue
        # A top-level op inside its part: its parent is the part label itself (or another part label).
        if e.cpu_parent is None or not e.cpu_parent.name.startswith("part:"):
            continue
        if e.name in PROJECTION_OPS:
            parts[parent.name][1] += e.cpu_time_total
            proj_shapes[(e.name, str(e.input_shapes[:2]) if e.input_shapes else "")] += e.cpu_time_total
        else:
            parts[parent.name][2] += e.cpu_time_total
            op_totals[(parent.name, e.name)] += e.cpu_time_total
    print(f"\nbreakdown per step (median step {step_ms:.1f} ms; the profiler's own cost is inside 'python'):")
    print("| part | calls/step | wall ms | in nested parts ms | projections ms | other ops ms | python+dispatch ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, (wall, proj, ops, calls) in sorted(parts.items(), key=lambda kv: -kv[1][0]):
        inner = nested[label]  # the layers inside "forward" are their own rows
        own = wall - inner - proj - ops
        print(f"| {label[5:]} | {calls / steps:.0f} | {wall / 1e3 / steps:.2f} | {inner / 1e3 / steps:.2f} | "
              f"{proj / 1e3 / steps:.2f} | {ops / 1e3 / steps:.2f} | {own / 1e3 / steps:.2f} |")
    print("\ntop non-projection ops by part (ms/step, inclusive of their children):")
    for (label, name), us in op_totals.most_common(25):
        print(f"  {label[5:]:<24} {name:<50} {us / 1e3 / steps:7.2f}")
    print("\nprojections by op and (input, weight) shape (ms/step):")
    for (name, shapes), us in proj_shapes.most_common(12):
        print(f"  {name:<26} {shapes:<44} {us / 1e3 / steps:7.2f}")


def profile_batch(llm, batch: int, steps: int, top: int, prompt_len: int, with_breakdown: bool) -> None:
    from qwen_ops import SamplingParams

    # Enough tokens that the first requests do not finish while the last ones still prefill (2048-token steps).
    prefill_steps = -(-batch * prompt_len // 2048) + 1
    params = SamplingParams(max_tokens=steps + 4 + prefill_steps, temperature=0, ignore_eos=True, detokenize=False)
    gen = torch.Generator().manual_seed(batch)
    for _ in range(batch):
        llm.add_request(torch.randint(1, 100000, (prompt_len,), generator=gen).tolist(), params)
    while not llm.step_stats or llm.step_stats[-1].num_prefills or llm.step_stats[-1].num_decodes < batch:
        llm.step()  # prefill until every request decodes
    llm.step()  # one decode step outside the profile (first-touch of the decode path)
    times = []
    labels = labelled_model_parts() if with_breakdown else contextlib.nullcontext()
    with labels, torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                        record_shapes=with_breakdown) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            llm.step()
            times.append(time.perf_counter() - t0)
    while llm.has_unfinished_requests():
        llm.step()
    step = statistics.median(times)
    events = prof.key_averages()
    in_ops = sum(e.self_cpu_time_total for e in events if not e.key.startswith("part:")) / 1e6 / steps
    print(f"\n## batch {batch}: median decode step {1e3 * step:.1f} ms over {steps} profiled steps "
          f"(load average {os.getloadavg()[0]:.1f}); time inside torch ops {1e3 * in_ops:.1f} ms/step, "
          f"outside (host Python and profiler) {1e3 * (sum(times) / steps - in_ops):.1f} ms/step")
    print(events.table(sort_by="self_cpu_time_total", row_limit=top))
    if with_breakdown:
        breakdown(prof, steps, 1e3 * step)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch-sizes", default="1,8")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--prompt-len", type=int, default=32, help="tokens per request's prompt")
    p.add_argument("--breakdown", action="store_true", help="label the model's parts and split each step by part")
    p.add_argument("--quantization", default=None, help="e.g. int8_weight_only (LLM's quantization=)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from qwen_ops import LLM

    sizes = [int(x) for x in args.batch_sizes.split(",")]
    max_len = max(256, args.prompt_len + args.steps + 16)
    llm = LLM(args.model, dtype=args.dtype, max_num_seqs=max(sizes), max_model_len=max_len,
              max_num_batched_tokens=max(2048, max(sizes)), quantization=args.quantization)
    print(f"model={llm.model_dir} dtype={args.dtype} quantization={args.quantization} "
          f"threads={torch.get_num_threads()}")
    for b in sizes:
        profile_batch(llm, b, args.steps, args.top, args.prompt_len, args.breakdown)


if __name__ == "__main__":
    main()
