"""A MoE decode step on the CPU for a Qwen3.5-35B-A3B-shaped layer stack cut to a few layers.

35B-A3B's shapes (hidden 2048, 256 experts of width 512, top-8, one shared
expert of width 512, 16/2 attention heads of 256, GDN 16/32 heads of 128) with
``--layers`` layers in the published pattern (three GDN layers, then one
full-attention layer) and random weights in ``--dtype``. The vocabulary is cut
to ``--vocab`` entries: the embedding and head are not what is measured.

Each decode step runs B requests, one token each, at ``--context`` tokens of
context (their KV blocks and GDN states are zeros: the values do not change
the work; the routing of random activations is what it is). Reported per
batch size: the whole step, the time per layer, the MoE block's time per
layer (router + ``fused_experts`` + shared expert), the distinct experts the
batch's tokens chose per layer, the bytes of those experts' weights (what the
expert op reads: an expert no token chose is never read), and those bytes
over the MoE block's time.

    python bench/moe/bench_moe_decode.py --layers 4 --batch-sizes 1,8,32 --steps 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from qwen_ops.model.loading.config import Qwen35Config
from qwen_ops.model.worker.kv_cache import allocate_caches, expert_bytes_per_layer
from qwen_ops.model.network.moe import SparseMoeBlock
from qwen_ops.model.network.qwen3_5 import Qwen35ForCausalLM
from qwen_ops.model.network.step_inputs import StepInputs
from qwen_ops.model.loading.weights import expected_shapes, stored_dtype
from qwen_ops.scheduling.step_metadata import AttentionState, StepMetadata

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def config_35b_a3b(layers: int, vocab: int) -> Qwen35Config:
    return Qwen35Config.from_dict({
        "model_type": "qwen3_5_moe_text", "vocab_size": vocab, "hidden_size": 2048, "num_hidden_layers": layers,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
        "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "max_position_embeddings": 262144,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
    })


def random_weights(config: Qwen35Config, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    weights = {}
    for name, shape in expected_shapes(config).items():
        t = torch.empty(shape, dtype=stored_dtype(name, dtype))
        if name.endswith("A_log"):
            t.uniform_(0.0, 2.0)
        elif len(shape) == 1:
            t.uniform_(-0.1, 0.1)
        else:
            t.normal_(0.0, shape[-1] ** -0.5)  # unit-scale outputs for unit-scale inputs
        weights[name] = t
    return weights


def decode_batch(batch: int, context: int, block_size: int, vocab: int, gen) -> StepInputs:
    """B decode rows at position ``context``; request r owns blocks 1 + r*M ... (block 0 is the null block)."""
    per_req = -(-(context + 1) // block_size)
    i32 = dict(dtype=torch.int32)
    blocks = 1 + torch.arange(batch * per_req, **i32).reshape(batch, per_req)
    positions = torch.full((batch,), context, dtype=torch.int64)
    slot = blocks[:, context // block_size].to(torch.int64) * block_size + context % block_size
    req_ids = [f"r{r}" for r in range(batch)]
    meta = StepMetadata(
        req_ids=req_ids, query_start_loc=torch.arange(batch + 1, **i32),
        seq_lens=torch.full((batch,), context + 1, **i32), context_lens=torch.full((batch,), context, **i32),
        block_tables=blocks, slot_mapping=slot, positions=positions,
        token_request_indices=torch.arange(batch, **i32),
        input_ids=torch.randint(0, vocab, (batch,), generator=gen), logits_indices=torch.arange(batch),
        sampling_req_ids=req_ids, num_decodes=batch, num_decode_tokens=batch, num_prefills=0,
        num_prefill_tokens=0, num_actual_tokens=batch, state_indices=torch.arange(batch, **i32),
        has_initial_state=torch.ones(batch, dtype=torch.bool), attn_state=AttentionState.DecodeOnly)
    return StepInputs.build(meta, torch.device("cpu"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--batch-sizes", default="1,8,32")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=5, help="timed steps per batch size (after one warm-up step)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    dtype = DTYPES[args.dtype]
    config = config_35b_a3b(args.layers, args.vocab)
    t0 = time.perf_counter()
    model = Qwen35ForCausalLM(config, random_weights(config, dtype, args.seed))
    built = time.perf_counter() - t0
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    one_expert = expert_bytes_per_layer(config, dtype) // config.num_experts
    print(f"# 35B-A3B-shaped stack: {args.layers} layers {list(config.layer_types)}, {args.dtype}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, weights built in {built:.1f} s")
    print(f"# one expert = {one_expert / 2**20:.2f} MiB; all 256 experts of a layer = "
          f"{expert_bytes_per_layer(config, dtype) / 2**30:.2f} GiB; load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    moe_times: list[float] = []
    distinct: list[int] = []
    forward = SparseMoeBlock.forward

    def timed(self, x, observer=None):
        def count(_layer, ids, _w):
            distinct.append(int(torch.unique(ids).numel()))
        start = time.perf_counter()
        out = forward(self, x, count)
        moe_times.append(time.perf_counter() - start)
        return out

    SparseMoeBlock.forward = timed
    gen = torch.Generator().manual_seed(args.seed)
    print("| batch | step median (ms) | step min (ms) | per layer (ms) | MoE block per layer (ms) "
          "| distinct experts per layer | expert bytes read per layer (MiB) | bytes / MoE time (GB/s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for batch in batch_sizes:
        per_req = -(-(args.context + 1) // args.block_size)
        caches = allocate_caches(config, num_blocks=1 + batch * per_req, block_size=args.block_size,
                                 num_state_slots=batch, dtype=dtype, kv_dtype=dtype, device=torch.device("cpu"))
        steps, moe, experts = [], [], []
        for step in range(args.steps + 1):
            fb = decode_batch(batch, args.context, args.block_size, args.vocab, gen)
            moe_times.clear()
            distinct.clear()
            start = time.perf_counter()
            model.forward(fb, caches)
            elapsed = time.perf_counter() - start
            if step:  # the first step is a warm-up
                steps.append(elapsed)
                moe.extend(moe_times)
                experts.extend(distinct)
        mean_experts = statistics.mean(experts)
        moe_med = statistics.median(moe)
        read = mean_experts * one_expert
        print(f"| {batch} | {statistics.median(steps) * 1e3:.1f} | {min(steps) * 1e3:.1f} | "
              f"{statistics.median(steps) / args.layers * 1e3:.1f} | {moe_med * 1e3:.1f} | {mean_experts:.1f} | "
              f"{read / 2**20:.1f} | {read / moe_med / 1e9:.2f} |")
    SparseMoeBlock.forward = forward
    print(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
