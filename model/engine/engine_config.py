"""``EngineConfig``: ``LLM``'s arguments checked and resolved, and the memory planned, before the engine is built.

As vLLM resolves ``EngineArgs`` into its config first, ``EngineConfig.from_args(**llm_kwargs)`` does
everything that needs no weights in memory: it checks every argument (a ``ValueError``/``TypeError``
naming it), finds the checkpoint (the built-in tiny model when none is given), reads its config, the
device, the step limits, the speculative config, the prefix-caching default, the page pool's block size
(raised for the GDN pages), the KV budget, ``max_model_len`` and the page pool's plan, and the
scheduler's config. ``describe()`` is the engine's budget line. ``LLMEngine`` then only builds from it:
the weights, the model, the caches the plan sized, the scheduler.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch

from ...scheduling import SchedulerConfig, default_batch_limits
from ..loading.config import Qwen35Config
from ..loading.weights import int8_schemes
from ..network.backends import refuse_unserved_shapes
from ..network.kv_cache_groups import num_gdn_groups
from ..network.mtp import count_mtp_layers
from ..spec_decode.speculative_config import SpeculativeConfig, parse_speculative_config
from ..worker.device_memory import default_device, default_kv_cache_gib, device_memory
from ..worker.kv_cache import (MemoryPlan, bytes_per_state_slot, fit_max_model_len, plan_memory, pool_block_size,
                               weight_bytes)

logger = logging.getLogger("qwen_ops.engine")

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _check_int(name: str, value, minimum: int, *, optional: bool = False) -> None:
    """Raise ValueError naming LLM's argument ``name`` unless ``value`` is an int >= minimum (or None if optional)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        none = " or None" if optional else ""
        raise ValueError(f"LLM({name}=...) must be an int >= {minimum}{none}, got {value!r}")


@dataclass(frozen=True)
class EngineConfig:
    """Everything ``LLMEngine`` builds from, resolved (see ``LLMEngine`` for what each argument means).

    model_dir: the checkpoint; config: its ``Qwen35Config``; dtype, kv_cache_dtype: torch dtypes;
    block_size_reason, max_model_len_reason: why they are what they are (for the budget line);
    plan: the page pool's ``MemoryPlan``; scheduler_config: what the scheduler runs with (its block size,
    blocks, ``max_num_seqs`` and ``max_model_len`` are the plan's).
    """

    model_dir: str
    config: Qwen35Config
    device: torch.device
    dtype: torch.dtype
    kv_cache_dtype: torch.dtype
    backend: str | None
    seed: int
    speculative_config: SpeculativeConfig | None
    num_mtp_layers: int  # the MTP layers that get KV caches (0 without speculation)
    enable_prefix_caching: bool
    block_size_reason: str
    max_model_len: int
    max_model_len_reason: str
    kv_cache_memory_gib: float
    plan: MemoryPlan
    scheduler_config: SchedulerConfig
    calibration_prompts: Sequence[str | list[int]] | None = None
    # Graph mode (``worker/graph_runner.py``): enforce_eager False compiles the forward; the reason says why
    # (given, or the device's default); compile_backend is torch.compile's; max_capture_size the largest
    # padded part of a step (default max_num_batched_tokens + max_num_seqs: every step's padding fits, the
    # padding sequences of a prefill part included).
    enforce_eager: bool = True
    enforce_eager_reason: str = "given"
    compile_backend: str = "inductor"
    max_capture_size: int = 1
    # INT8 projections (``loading/quantization.py``): the method given or found (None, "ascend",
    # "int8_weight_only"), each INT8 weight's scheme by name, and the bytes the weights take with them.
    quantization: str | None = None
    int8_schemes: dict = field(default_factory=dict)
    weight_bytes: int = 0

    @property
    def num_speculative_tokens(self) -> int:
        return self.speculative_config.num_speculative_tokens if self.speculative_config is not None else 0

    @property
    def block_size(self) -> int:
        return self.scheduler_config.block_size

    @classmethod
    def from_args(cls, model: str | os.PathLike | None = None, dtype: str = "float32", kv_cache_dtype: str = "auto",
                  block_size: int = 16, num_blocks: int | None = None, max_num_batched_tokens: int | None = None,
                  max_num_seqs: int | None = None, enable_prefix_caching: bool | None = None,
                  backend: str | None = None,
                  seed: int = 0, *, max_model_len: int | None = None, device: str | torch.device | None = None,
                  kv_cache_memory_gib: float | None = None, enable_chunked_prefill: bool = True,
                  long_prefill_token_threshold: int = 0,
                  calibration_prompts: Sequence[str | list[int]] | None = None,
                  speculative_config=None, enforce_eager: bool | None = None,
                  compile_backend: str | None = None, max_capture_size: int | None = None,
                  quantization: str | None = None, mamba_cache_mode: str | None = None,
                  gdn_checkpoint_memory_share: float = 0.25) -> "EngineConfig":
        """Check and resolve ``LLMEngine``'s arguments (the same names and defaults)."""
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise ValueError(f"LLM(dtype=...) must be one of {sorted(DTYPES)}, got {dtype!r}")
        if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in ("auto", "int8"):
            raise ValueError(f"LLM(kv_cache_dtype=...) must be 'auto' or 'int8', got {kv_cache_dtype!r}")
        _check_int("block_size", block_size, 1)
        # Block 0 is the null block: one more is needed to hold anything.
        _check_int("num_blocks", num_blocks, 2, optional=True)
        _check_int("max_num_batched_tokens", max_num_batched_tokens, 1, optional=True)
        _check_int("max_num_seqs", max_num_seqs, 1, optional=True)
        # A request needs at least one prompt token and room for one generated token.
        _check_int("max_model_len", max_model_len, 2, optional=True)
        if enable_prefix_caching is not None and not isinstance(enable_prefix_caching, bool):
            raise ValueError(f"LLM(enable_prefix_caching=...) must be True, False or None, got "
                             f"{enable_prefix_caching!r}")
        if enable_prefix_caching and not enable_chunked_prefill:
            raise ValueError("LLM(enable_prefix_caching=True) needs enable_chunked_prefill=True on a hybrid model "
                             "such as Qwen3.5: its GDN states are cached at block-aligned chunk ends (vLLM's align "
                             "mode); pass enable_prefix_caching=False to run without chunked prefill")
        if max_num_batched_tokens is not None and max_num_seqs is not None and max_num_batched_tokens < max_num_seqs:
            raise ValueError(f"LLM(max_num_batched_tokens={max_num_batched_tokens}) must be >= "
                             f"max_num_seqs={max_num_seqs}: every running request may decode in one step")
        if enforce_eager is not None and not isinstance(enforce_eager, bool):
            raise ValueError(f"LLM(enforce_eager=...) must be True, False or None, got {enforce_eager!r}")
        _check_int("max_capture_size", max_capture_size, 1, optional=True)
        if model is None:
            from ..loading.default_model import default_model_dir

            model = default_model_dir()
        model_dir = os.fspath(model)
        device = torch.device(device) if device is not None else default_device()
        torch_dtype = DTYPES[dtype]
        config = Qwen35Config.from_pretrained(model_dir)
        refuse_unserved_shapes(backend, config, device)
        if max_model_len is not None and max_model_len > config.max_position_embeddings:
            raise ValueError(f"LLM(max_model_len={max_model_len}) exceeds the model's max_position_embeddings="
                             f"{config.max_position_embeddings} (config.json)")

        schemes = int8_schemes(model_dir, config, quantization)  # checks the argument and the description
        quantization = ("int8_weight_only" if quantization == "int8_weight_only" else
                        "ascend" if schemes else None)
        weights_bytes = weight_bytes(config, torch_dtype, schemes)

        memory_gib, device_name = device_memory(device)
        default_tokens, default_seqs = default_batch_limits(memory_gib, device_name, "offline")
        if max_num_batched_tokens is None:
            max_num_batched_tokens = max(default_tokens, max_num_seqs or 0)
        if max_num_seqs is None:
            max_num_seqs = min(default_seqs, max_num_batched_tokens)
        if kv_cache_memory_gib is None:
            # What the text weights will take (``weight_bytes``: exactly the tensors ``load_weights`` keeps).
            kv_cache_memory_gib = default_kv_cache_gib(device, memory_gib, weights_bytes / 2**30)
        if isinstance(kv_cache_memory_gib, bool) or not isinstance(kv_cache_memory_gib, (int, float)) \
                or not kv_cache_memory_gib > 0:
            raise ValueError(f"LLM(kv_cache_memory_gib=...) must be a number > 0, got {kv_cache_memory_gib!r}")
        kv_dtype = torch.int8 if kv_cache_dtype == "int8" else torch_dtype

        spec, mtp_layers = None, 0
        if speculative_config is not None:
            checkpoint_mtp_layers = count_mtp_layers(model_dir, config)
            spec = parse_speculative_config(speculative_config, num_mtp_layers=checkpoint_mtp_layers,
                                            max_num_batched_tokens=max_num_batched_tokens, model_name=model_dir)
            mtp_layers = checkpoint_mtp_layers  # the MTP layers keep their own KV caches on the same blocks
        k = spec.num_speculative_tokens if spec is not None else 0

        groups = num_gdn_groups(config)
        if enable_prefix_caching is None:  # vLLM 0.33: on for generative hybrid models (see LLMEngine)
            enable_prefix_caching = enable_chunked_prefill or groups == 0
        gdn_mode = _gdn_cache_mode(mamba_cache_mode, groups, enable_prefix_caching, gdn_checkpoint_memory_share)
        chunk_mode = gdn_mode == "chunk"
        requested_block_size = block_size
        if not chunk_mode:  # "chunk" mode keeps the block asked for: the GDN states are not in the pool's pages
            block_size = pool_block_size(config, block_size, torch_dtype, kv_dtype)
        block_size_reason = (
            "" if block_size == requested_block_size else
            f" (raised from {requested_block_size}: an attention page must hold a GDN page, vLLM's rule)")
        if block_size != requested_block_size:
            logger.info("block_size=%d%s", block_size, block_size_reason)
        # A request's GDN pages in the pool: "none" mode one per group (plus one per draft token, the
        # 1 + k state rows of speculation), align mode at most 2 live ones per group (older ones go to
        # the cache), as vLLM's scheduler counts them.
        pages = dict(gdn_pages_per_request=groups * ((2 if enable_prefix_caching and not chunk_mode else 1) + k),
                     state_rows_per_request=1 + k, num_mtp_layers=mtp_layers, gdn_in_pages=not chunk_mode)
        budget_bytes = int(kv_cache_memory_gib * 2**30)
        num_checkpoints, outside_bytes = 0, 0
        if chunk_mode:
            # The checkpoint pool takes its share of the budget; the running GDN states (1 + k rows per
            # request) and the checkpoints are outside the page pool, which gets the rest.
            slot_bytes = bytes_per_state_slot(config, torch_dtype)
            num_checkpoints = max(int(budget_bytes * gdn_checkpoint_memory_share) // slot_bytes, 1)
            outside_bytes = (num_checkpoints + max_num_seqs * (1 + k)) * slot_bytes
            if outside_bytes >= budget_bytes:
                raise ValueError(f"LLM(kv_cache_memory_gib={kv_cache_memory_gib}) cannot hold the GDN states of "
                                 f"max_num_seqs={max_num_seqs} requests and {num_checkpoints} GDN checkpoints "
                                 f"({outside_bytes / 2**20:.1f} MiB): raise it or lower max_num_seqs")
            budget_bytes -= outside_bytes
        if max_model_len is not None:
            max_model_len_reason = "given"
        else:
            max_model_len, max_model_len_reason = _fitted_max_model_len(
                config, kv_cache_memory_gib, num_blocks, budget_bytes=budget_bytes, block_size=block_size,
                max_num_seqs=max_num_seqs, dtype=torch_dtype, kv_dtype=kv_dtype, **pages)

        def plan_pool(budget: int) -> MemoryPlan:
            return plan_memory(config, budget_bytes=budget, block_size=block_size, max_num_seqs=max_num_seqs,
                               max_model_len=max_model_len, dtype=torch_dtype, kv_dtype=kv_dtype,
                               num_blocks=num_blocks, **pages)

        plan = plan_pool(budget_bytes)
        if chunk_mode:
            # A checkpoint is hit only with the attention blocks of the prefix before it, so the pool never
            # needs more checkpoints than the page pool holds boundaries: capping there keeps a small pool
            # (num_blocks given) from reserving its whole share, and makes the pool's size, and so the
            # compiled graphs' shapes, depend on the arguments rather than on the memory free at start.
            granularity = math.lcm(SchedulerConfig.gdn_checkpoint_tokens, block_size)
            cap = max((plan.num_blocks - 1) * block_size // granularity, 1)
            if num_checkpoints > cap:
                freed = (num_checkpoints - cap) * slot_bytes
                num_checkpoints = cap
                outside_bytes -= freed
                if num_blocks is None:  # the freed share buys pages (whose boundaries only raise the cap)
                    plan = plan_pool(budget_bytes + freed)
            # The pool's blocks hold attention pages only (plan_memory sized them so: state_bytes is 0); the
            # running states and the checkpoints are the bytes outside it.
            plan = replace(plan, num_state_slots=plan.max_num_seqs * (1 + k), gdn_checkpoints=num_checkpoints,
                           state_bytes_outside=outside_bytes)
        scheduler_config = SchedulerConfig(
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=plan.max_num_seqs,
            block_size=block_size, num_blocks=plan.num_blocks, max_model_len=max_model_len,
            enable_chunked_prefill=enable_chunked_prefill, enable_prefix_caching=enable_prefix_caching,
            long_prefill_token_threshold=long_prefill_token_threshold,
            num_gdn_groups=groups,
            num_speculative_tokens=k,
            # MTP is an EAGLE-style drafter (its KV at a position needs the next token): vLLM's use_eagle.
            use_eagle=k > 0 and groups > 0,
            mamba_cache_mode=gdn_mode, num_gdn_checkpoints=num_checkpoints)
        enforce_eager, eager_reason, compile_backend = _graph_mode(enforce_eager, compile_backend, device)
        return cls(model_dir=model_dir, config=config, device=device, dtype=torch_dtype, kv_cache_dtype=kv_dtype,
                   backend=backend, seed=seed, speculative_config=spec, num_mtp_layers=mtp_layers,
                   enable_prefix_caching=enable_prefix_caching, block_size_reason=block_size_reason,
                   max_model_len=max_model_len, max_model_len_reason=max_model_len_reason,
                   kv_cache_memory_gib=kv_cache_memory_gib, plan=plan, scheduler_config=scheduler_config,
                   calibration_prompts=calibration_prompts, enforce_eager=enforce_eager,
                   enforce_eager_reason=eager_reason, compile_backend=compile_backend,
                   max_capture_size=max_capture_size or max_num_batched_tokens + plan.max_num_seqs,
                   quantization=quantization, int8_schemes=schemes, weight_bytes=weights_bytes)

    def describe(self) -> str:
        """One line with the limits and memory in use (the engine's ``budget_summary()``)."""
        p, c = self.plan, self.scheduler_config
        kv = str(self.kv_cache_dtype).replace("torch.", "")
        rows = f" {p.state_rows_per_request}_rows_per_request" if p.state_rows_per_request > 1 else ""
        if p.gdn_checkpoints:
            states = (f"gdn_states=outside_pool ({p.num_state_slots} rows + {p.gdn_checkpoints} checkpoints, "
                      f"{p.state_bytes_outside / 2**20:.1f} MiB)")
        else:
            states = f"gdn_states=in_pool_pages{rows} ({p.state_bytes / 2**20:.1f} MiB)"
        caching = ("off" if not c.enable_prefix_caching else
                   f"on (mamba_cache_mode={c.gdn_cache_mode})" if c.num_gdn_groups else "on")
        return (f"max_num_batched_tokens={c.max_num_batched_tokens} max_num_seqs={c.max_num_seqs} "
                f"max_model_len={c.max_model_len} ({self.max_model_len_reason}) block_size={c.block_size}"
                f"{self.block_size_reason} num_blocks={c.num_blocks} "
                f"kv_cache={kv} ({p.kv_bytes / 2**20:.1f} MiB) {states} prefix_caching={caching} "
                f"budget={self.kv_cache_memory_gib:.2f} GiB device={self.device} {self.describe_weights()} "
                f"{self.describe_graph_mode()}")

    def describe_weights(self) -> str:
        """``weights=<dtype>[+int8 <schemes> (n projections)] (MiB)``: what the weights take (INT8 ones counted small)."""
        kind = str(self.dtype).replace("torch.", "")
        if self.int8_schemes:
            names = "/".join(sorted(set(self.int8_schemes.values())))
            kind += f"+int8 {names} ({len(self.int8_schemes)} projections, quantization={self.quantization})"
        return f"weights={kind} ({self.weight_bytes / 2**20:.1f} MiB)"

    def describe_graph_mode(self) -> str:
        """``enforce_eager=...`` with why, and the compile settings when graphs run."""
        if self.enforce_eager:
            return f"enforce_eager=True ({self.enforce_eager_reason})"
        return (f"enforce_eager=False ({self.enforce_eager_reason}; compile_backend={self.compile_backend} "
                f"max_capture_size={self.max_capture_size})")

    __str__ = describe


# The default of enforce_eager by device: measured on the CPU (bench/RESULTS.md, "Graph mode"), vLLM's
# default (graphs) on accelerators.
CPU_EAGER_REASON = ("the CPU default: graphs measured 0.7x-1.1x of eager there after minutes of compiling, "
                    "bench/RESULTS.md")


def _graph_mode(enforce_eager: bool | None, compile_backend: str | None, device: torch.device):
    """(enforce_eager, why, compile_backend) resolved: the device's default when None; the backend checked."""
    from ..worker.graph_runner import DEFAULT_BACKEND, available_backends

    if enforce_eager is None:
        enforce_eager = device.type == "cpu"
        reason = CPU_EAGER_REASON if enforce_eager else f"the {device.type} default: graphs, as vLLM"
    else:
        reason = "given"
    if compile_backend is None:
        compile_backend = DEFAULT_BACKEND.get(device.type, "inductor")
    elif not isinstance(compile_backend, str) or compile_backend not in available_backends():
        raise ValueError(f"LLM(compile_backend=...) must be one of {available_backends()}, got {compile_backend!r}")
    return enforce_eager, reason, compile_backend


def _gdn_cache_mode(mode: str | None, groups: int, caching: bool, share: float) -> str | None:
    """The engine's prefix-caching mode of a hybrid model's GDN states (vLLM's ``mamba_cache_mode`` spelling),
    checked: "chunk" (the default with prefix caching: the block stays as asked, GDN checkpoints every 64
    tokens), "align" (vLLM 0.33's default, selectable) or "none" (no prefix caching); None for a model
    without GDN layers."""
    if mode not in (None, "none", "align", "chunk"):
        raise ValueError(f"LLM(mamba_cache_mode=...) must be 'none', 'align', 'chunk' or None, got {mode!r}")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
        raise ValueError(f"LLM(gdn_checkpoint_memory_share=...) must be a number in (0, 1), got {share!r}")
    if not groups:
        if mode not in (None, "none"):
            raise ValueError(f"LLM(mamba_cache_mode={mode!r}) needs a hybrid model (one with GDN layers)")
        return None
    if mode is None:
        return "chunk" if caching else "none"
    if (mode != "none") != caching:
        raise ValueError(f"LLM(mamba_cache_mode={mode!r}) does not go with enable_prefix_caching={caching}: "
                         "'none' is the mode without prefix caching, 'align' and 'chunk' the modes with it")
    return mode


def _fitted_max_model_len(config: Qwen35Config, budget_gib: float, num_blocks: int | None, **plan) -> tuple[int, str]:
    """(max_model_len, why) when none is given: the config's, or the longest the budget holds if shorter."""
    configured = config.max_position_embeddings
    if num_blocks is not None:  # the caller sized the cache: requests too long for it are refused one by one
        return configured, "the config's max_position_embeddings"
    fits = fit_max_model_len(config, num_blocks=num_blocks, **plan)
    if fits >= configured or fits < 2:  # below 2 nothing fits: plan_memory says why
        return configured, "the config's max_position_embeddings"
    why = (f"fitted to the KV budget: one request of the config's max_position_embeddings={configured} "
           f"tokens does not fit {budget_gib:.2f} GiB; pass max_model_len or kv_cache_memory_gib to change it")
    logger.warning("max_model_len=%d (%s)", fits, why)
    return fits, why
