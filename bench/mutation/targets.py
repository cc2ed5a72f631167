"""What is mutation-tested, and by which tests: one table for the runner and its test.

A target is a source file (Python: mutated by cosmic-ray; C++: by ``cpp_mutator``) and the test
files that must catch a bug planted in it. The tests are the ones that exercise the file (found by
what imports it or calls its op), not the whole suite: a mutant costs one run of them.

``EQUIVALENT`` lists surviving mutants that cannot be killed because the mutated program is the
same program (or differs only where no caller can observe it), each with the reason. A survivor not
listed there is a gap in the tests and is reported as such.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    source: str  # repository-relative
    tests: tuple[str, ...]
    # C++: the instruction-set variant (``_C.cpu_isas()``) the source is; a CPU without it cannot run it, so
    # its mutants cannot be caught here: the runner reports the target as not run, with this reason.
    isa: str = ""
    # Where the tests run: "" in the runner's own environment (the project's .venv), "vllm" in the vLLM 0.33.0
    # environment that .ci/vllm_tests builds (the plug-in's tests need vLLM, which the .venv cannot hold).
    env: str = ""

    @property
    def kind(self) -> str:
        return "python" if self.source.endswith(".py") else "cpp"


TARGETS: tuple[Target, ...] = (
    # GDN state pages in the block pool (prefix caching of the hybrid model)
    Target("GDN pages", "model/worker/gdn_pages.py",
           ("tests/model/test_gdn_page_tables.py", "tests/model/test_components.py", "tests/model/test_prefix_caching_config.py",
            "tests/model/test_mtp_memory_plan.py", "tests/model/test_prefix_caching.py")),
    # MTP drafting and rejection sampling
    Target("MTP drafter", "model/spec_decode/drafter.py",
           ("tests/model/test_spec_decoder_rows.py", "tests/model/test_mtp_engine_drafts.py",
            "tests/model/test_mtp_drafter.py", "tests/model/test_mtp_speculative_loop.py",
            "tests/model/test_mtp_engine.py")),
    # Its unit tests only: tests/model/test_mtp_sampling.py (the law of 2,000 sampled requests through the engine,
    # over 2 min of CPU for one case) runs past the per-test limit on a loaded machine; the sampler's branches are
    # reached by the unit tests (the one-step law with deterministic and sampled drafters, greedy, seeds).
    Target("rejection sampler", "model/sample/rejection_sampler.py", ("tests/model/test_mtp_rejection_sampler.py",)),
    # The MoE router (the layer) and the expert op
    Target("MoE layer (router)", "model/network/moe.py",
           ("tests/model/test_moe_model.py", "tests/model/test_moe_parity.py")),
    Target("MoE expert op", "ops/moe/op.py", ("tests/ops/test_moe_reference.py", "tests/ops/test_bad_inputs.py")),
    Target("MoE expert grouping", "ops/moe/grouping.py", ("tests/ops/test_moe_reference.py",)),
    Target("MoE reference", "ops/moe/reference.py", ("tests/ops/test_moe_reference.py",)),
    # The SIMD CPU kernels (C++; every instruction-set variant the CPU runs is tested)
    Target("GDN recurrent decode (C++)", "bindings/cpu/gdn_recurrent_decode.cpp",
           ("tests/ops/test_vectorized_cpu_forms.py", "tests/ops/test_kv_kernel_isas.py")),
    Target("GDN head update (C++)", "bindings/cpu/gdn_head_update.h",
           ("tests/ops/test_vectorized_cpu_forms.py", "tests/ops/test_gdn_decode_step.py")),
    Target("GDN decode step (C++)", "bindings/cpu/gdn_decode_step_cpu.cpp", ("tests/ops/test_gdn_decode_step.py",)),
    # A decode step's cache write and attention in one call: the C++ operator (its checks) and the op
    Target("attention decode step (C++)", "bindings/cpu/attention_decode_step_cpu.cpp",
           ("tests/ops/test_attention_decode_step.py",)),
    Target("attention decode step op", "ops/attention/decode_step_op.py", ("tests/ops/test_attention_decode_step.py",)),
    Target("paged decode attention SIMD (C++)", "bindings/cpu/paged_decode_attention_simd.h",
           ("tests/ops/test_kv_kernel_isas.py",)),
    Target("INT8 quantize AVX-512 (C++)", "bindings/cpu/int8_quantize_avx512.cpp",
           ("tests/ops/test_kv_kernel_isas.py",), isa="avx512"),
    Target("INT8 quantize AVX2 (C++)", "bindings/cpu/int8_quantize_avx2.cpp", ("tests/ops/test_kv_kernel_isas.py",),
           isa="avx2"),
    # Graph mode: the step padded to a capture size, and the runner of the compiled graphs
    Target("graph mode step padding", "model/worker/step_padding.py", ("tests/model/test_graph_mode.py",)),
    Target("graph mode runner", "model/worker/graph_runner.py", ("tests/model/test_graph_mode.py",)),
    Target("small-M linear tiles (C++)", "bindings/cpu/small_m_linear_tiles.h", ("tests/ops/test_small_m_linear.py",)),
    # Its AVX-512 variant with the row-lanes form (from 10 rows of x), and the dispatcher that packs x for it
    Target("small-M linear AVX-512 (C++)", "bindings/cpu/small_m_linear_avx512.cpp",
           ("tests/ops/test_small_m_linear.py",), isa="avx512"),
    Target("small-M linear dispatch (C++)", "bindings/cpu/small_m_linear.cpp",
           ("tests/ops/test_small_m_linear.py", "tests/ops/test_small_m_linear_bf16.py")),
    # The fused GDN decode step (one call per layer and step): its op (checks, dispatch) and its reference
    Target("GDN decode step op", "ops/gdn/decode_step/op.py", ("tests/ops/test_gdn_decode_step.py",)),
    Target("GDN decode step reference", "ops/gdn/decode_step/reference.py", ("tests/ops/test_gdn_decode_step.py",)),
    # The fused GDN decode step's kernels: Triton (run by the interpreter) and Ascend C (on the stand-in)
    Target("GDN decode step Triton", "ops/gdn/decode_step/triton.py", ("tests/ops/test_gdn_decode_step_backends.py",)),
    Target("GDN decode step (Ascend C)", "ops_ascendc/gdn_decode_step/op_kernel/gdn_decode_step.cpp",
           ("tests/ops/test_gdn_decode_step_backends.py",)),
    # The MoE experts in Ascend C (on the stand-in)
    Target("fused experts (Ascend C)", "ops_ascendc/fused_experts/op_kernel/fused_experts.cpp",
           ("tests/ascendc/test_ascendc_fused_experts.py",)),
    # The Ascend C chunk kernel (on the stand-in), which now also writes the checkpoints a prefix cache asks for
    Target("chunk GDN (Ascend C)", "ops_ascendc/chunk_gated_delta_rule/op_kernel/chunk_gated_delta_rule.cpp",
           ("tests/ops/test_gdn_chunk_checkpoints.py", "tests/ascendc/test_ascendc_chunk_gdn.py")),
    # Prefix caching at chunk granularity: the checkpoint pool (scheduler side), the rows the runner loads and
    # saves, and the chunk kernel's emission of the states at the checkpoint boundaries
    Target("GDN checkpoint pool", "scheduling/gdn_checkpoints.py",
           ("tests/scheduling/test_chunk_mode.py", "tests/scheduling/test_rollback.py",
            "tests/model/test_chunk_prefix_caching.py")),
    Target("GDN checkpoint rows", "model/worker/gdn_checkpoint_rows.py",
           ("tests/model/test_gdn_checkpoint_model.py", "tests/model/test_chunk_prefix_caching.py")),
    # The vLLM plug-in: its attention backend (paged INT8 KV and the mixed batch through our ops) and its GDN
    # layer, judged by tests_vllm/ in the vLLM environment (``--vllm-python``)
    Target("vLLM plug-in attention backend", "qwen_ops/vllm_plugin/attention_backend.py",
           ("tests_vllm/test_vllm_plugin.py",), env="vllm"),
    Target("vLLM plug-in GDN layer", "qwen_ops/vllm_plugin/gdn_layer.py", ("tests_vllm/test_vllm_plugin.py",),
           env="vllm"),
    Target("chunk checkpoints Triton", "ops/gdn/triton_chunk.py",
           ("tests/ops/test_gdn_chunk_checkpoints.py", "tests/triton/test_gdn_triton.py",
            "tests/triton/test_kernel_configs.py")),
)

# (source, the mutated line's text stripped, operator or a prefix of it) -> why no test can tell. The operator is
# cosmic-ray's name (``ReplaceBinaryOperator_BitOr_LShift``) or, for C++, ``original -> replacement``.
_ANNOTATION = "a type annotation under `from __future__ import annotations`: a string, never evaluated"
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("ops/attention/decode_step_op.py",
     "def takes_cpu_kernel(device: torch.device, backends: dict[str, str | None]) -> bool:",
     "ReplaceBinaryOperator_BitOr_"): _ANNOTATION,
    ("model/network/moe.py",
     "def __init__(self, config: Qwen35Config, layer: int, weights: dict[str, torch.Tensor], backend: str | None):",
     "ReplaceBinaryOperator_BitOr_"): _ANNOTATION,
    ("model/network/moe.py",
     "def forward(self, x: torch.Tensor, observer: RoutingObserver | None = None) -> torch.Tensor:",
     "ReplaceBinaryOperator_BitOr_"): _ANNOTATION,
    ("ops/moe/grouping.py", "offsets[1:] = torch.cumsum(counts, 0)", "NumberReplacer"):
        "counts is 1-D (bincount): dim 0 and dim -1 are the same dimension",
    ("ops/moe/reference.py", "if t == 0:", "NumberReplacer"):
        "a shortcut: with no tokens the general path also returns the zero [0, H] output (every expert's range is empty)",
    ("ops/moe/reference.py", "if lo == hi:", "ReplaceComparisonOperator_Eq_GtE"):
        "offsets are a cumulative sum of counts, so lo <= hi always: lo >= hi holds exactly when lo == hi",
    ("ops/moe/grouping.py", "pairs = torch.argsort(flat, stable=True)", "ReplaceTrueWithFalse"):
        "which order an expert's tokens take inside its range changes no output row (each row is computed on "
        "its own and scattered back by its index), and torch's CPU sort is stable either way",
    ("model/worker/gdn_pages.py",
     "self.columns = GdnStateColumns(num_gdn_groups, block_size, align) if align and not num_speculative_tokens \\",
     "ReplaceAndWithOr"):
        "the two cases it changes read the same rows: without align mode GdnStateColumns(align=False) returns "
        "each table's page 0 as the plain path does; with speculation the windows are used and columns only "
        "forgets requests",
    ("model/worker/gdn_pages.py",
     "if int(pages[:, 0].min()) < 1 or int(pages[:, 0].max()) >= caches.num_blocks:", "NumberReplacer"):
        "pages has two columns (source, destination): column -1 is column 1, the destinations, which the check "
        "above already holds to [1, num_blocks) (a mutant of the other index)",
    ("model/network/moe.py", "weights, ids = torch.topk(probs, top_k, dim=-1)", "ReplaceUnaryOperator_Delete_USub"):
        "probs is 2-D [T, E] (the router's logits of x [T, H]): dim 1 is dim -1",
    ("model/worker/graph_runner.py", "elif value is None:", "ReplaceComparisonOperator_Is_IsNot"):
        "the key tells the same steps apart: a field that is None in one step and a tensor in another still "
        "differs (the tensor's entry is in one key only), and the mutant's (name, None) entry for any other "
        "value is the same in every step",
    ("model/spec_decode/drafter.py", "at = b + len(emitted[request_id]) - 1", "ReplaceBinaryOperator_Add_BitOr"):
        "b | x equals b + x whenever b = 0 or x = 0, and one of them always is: drafts are verified only on "
        "decode rows, whose last known token is row b = 0, and a row with b > 0 (a prompt's last chunk) has no "
        "drafts, so it emits one token (x = 0)",
    ("ops/gdn/triton_chunk.py", "g_last = tl.sum(g_row, axis=0)  # G at the chunk's last row (rows past it add 0)",
     "NumberReplacer"):
        "g_row is 1-D (one gate per row of the chunk, loaded over tl.arange(0, BT)): axis -1 is axis 0",
    ("bindings/cpu/small_m_linear.cpp", "if (m == 0 || n == 0) return out;", "|| -> &&"):
        "a shortcut: with m = 0 every kernel's loops over rows of x run zero times, and with n = 0 there is no "
        "column unit to split, so the empty output is returned either way",
    ("bindings/cpu/small_m_linear_tiles.h",
     "for (int64_t r = 0; r < M; ++r) __builtin_prefetch(out + r * N + n + kBlockColumns, 1, 3);",
     "+ -> -"):
        "__builtin_prefetch is a hint that never faults and changes no value: prefetching the tile before "
        "instead of the next one can only change the speed",
    ("qwen_ops/vllm_plugin/gdn_layer.py",
     "mixed_qkv, z = mixed_qkvz.split([qkv_size, self.value_dim // self.tp_size], dim=-1)",
     "ReplaceUnaryOperator_Delete_USub"):
        "vLLM passes the layer 2-D hidden states [num_tokens, hidden], so the projection is 2-D: dim 1 is dim -1",
}


def by_name(names: list[str]) -> list[Target]:
    known = {t.name: t for t in TARGETS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown target(s) {unknown}; known: {sorted(known)}")
    return [known[n] for n in names]
