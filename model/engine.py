"""The offline engine: ``LLM``, ``SamplingParams``, ``RequestOutput`` (vLLM's names), and streaming.

Each step is the loop the scheduler defines: ``schedule()``, apply what it
changed to the persistent ``InputBatch`` (per-request rows: block table,
cursor, GDN state slot, sampling settings) and lay the step out from those rows
(decode rows first, then prefill chunks), run one forward over the whole mixed
batch, sample the requests that reached the end of their tokens,
``update_from_output()``.

Example::

    from qwen_ops import LLM, SamplingParams
    llm = LLM()                       # the built-in tiny model; or LLM("path/to/Qwen3.5")
    out = llm.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0))
    print(out[0].outputs[0].text)
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import torch

from ..ops import kv_scales_from_absmax
from ..scheduling import Request, Scheduler, SchedulerConfig, default_batch_limits
from .backends import describe as describe_backends
from .config import Qwen35Config
from .forward_batch import ForwardBatch
from .input_batch import InputBatch
from .kv_cache import allocate_caches, plan_memory
from .qwen3_5 import Qwen35ForCausalLM
from .sampling import SamplingParams, sample
from .weights import load_weights

logger = logging.getLogger("qwen_ops.engine")

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "StreamOutput", "StepStats"]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# KV memory used on a CPU when no budget is given: the host's RAM is shared with everything else.
CPU_DEFAULT_KV_GIB = 0.25
ACCELERATOR_MEMORY_UTILIZATION = 0.9
CALIBRATION_TEXT = (
    "The quick brown fox jumps over the lazy dog. Large language models are served in steps: each step "
    "schedules decode tokens and prefill chunks under a token budget, writes keys and values into a paged "
    "cache, and samples the next token of every request that reached the end of its prompt. "
    "1 2 3 4 5 6 7 8 9 10. 你好，世界。Bonjour le monde! def f(x): return x * 2\n"
)


@dataclass
class CompletionOutput:
    """One generated sequence: its tokens, text, why it ended, and logprobs when asked."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None  # "stop", "length" or "abort"
    stop_reason: int | None = None
    logprobs: list[dict[int, float]] | None = None


@dataclass
class RequestOutput:
    """A request's result (vLLM's shape): ``outputs[0]`` is the completion."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: dict[str, float] = field(default_factory=dict)  # arrival, first_token, finished times (s)


@dataclass
class StreamOutput:
    """New tokens of one request since the previous item of a ``stream()``."""

    index: int  # position of the prompt in the list passed to stream()
    request_id: str
    new_token_ids: list[int]
    new_text: str
    finished: bool
    finish_reason: str | None = None


@dataclass
class StepStats:
    """What one engine step did (also the line ``--trace`` prints)."""

    step: int
    num_tokens: int
    num_decodes: int
    num_prefills: int
    num_sampled: int
    num_preempted: int
    num_free_blocks: int
    seconds: float

    def line(self) -> str:
        return (f"step {self.step:5d} tokens={self.num_tokens:5d} decodes={self.num_decodes:4d} "
                f"prefills={self.num_prefills:3d} sampled={self.num_sampled:4d} preempted={self.num_preempted} "
                f"free_blocks={self.num_free_blocks} {self.seconds * 1e3:8.2f} ms")


@dataclass
class _Tracked:
    """The engine's record of a request from add to finish."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    generator: torch.Generator
    arrival: float
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    finish_reason: str | None = None
    stop_reason: int | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    streamed_text: str = ""
    streamed_tokens: int = 0


def _derived_seed(seed: int, request_id: str) -> int:
    """A request's seed when it has none: fixed by the engine seed and its id (Python's hash() is not)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{request_id}".encode()).digest()[:8], "little") % 2**63


def _default_device() -> torch.device:
    if hasattr(torch, "npu") and torch.npu.is_available():  # torch_npu registers torch.npu
        return torch.device("npu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def _device_memory(device: torch.device) -> tuple[float, str]:
    """(memory in GiB, device name) as the batch-limit defaults read them."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return props.total_memory / 2**30, props.name
    if device.type == "npu":
        props = torch.npu.get_device_properties(device)
        return props.total_memory / 2**30, props.name
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, "cpu"


def _check_int(name: str, value, minimum: int, *, optional: bool = False) -> None:
    """Raise ValueError naming LLM's argument ``name`` unless ``value`` is an int >= minimum (or None if optional)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        none = " or None" if optional else ""
        raise ValueError(f"LLM({name}=...) must be an int >= {minimum}{none}, got {value!r}")


class LLM:
    """Serve a Qwen3.5 checkpoint with continuous batching, a paged KV cache and GDN state pools.

    Args:
        model: a directory with config.json and safetensors weights (a text-only
            ``qwen3_5_text`` or multimodal ``qwen3_5`` checkpoint); None: the
            built-in tiny random model (see ``qwen_ops.model.default_model``).
        dtype: "float32", "float16" or "bfloat16" (weights and activations).
        kv_cache_dtype: "auto" (the model dtype) or "int8" (per-channel scales
            from the checkpoint's msModelSlim ``kv_cache_scale`` tensors, else
            from a calibration pass; ``kv_scale_source`` says which).
        block_size: tokens per KV block (int >= 1).
        num_blocks: KV blocks including the null block 0 (int >= 2; default: from the memory budget).
        max_num_batched_tokens, max_num_seqs: step limits, ints >= 1 with
            max_num_batched_tokens >= max_num_seqs (default: the scheduler's
            ``default_batch_limits`` for this device, offline usage, adjusted to
            that rule; ``max_num_seqs`` also shrinks to the GDN state slots the budget holds).
        enable_prefix_caching: not supported yet (ValueError): the scheduler runs vLLM's align
            mode, but the model does not keep its GDN states in the pool's pages yet.
        backend: the ops backend ("torch", "triton", "ascendc"; None: by device). Ops the
            chosen backend does not implement run on the device's default backend
            (``backend_summary()`` says which).
        seed: seeds the sampling of requests that have no seed of their own.
        max_model_len: longest sequence, prompt plus generated tokens (int >= 2, at most the
            config's max_position_embeddings, the default). A prompt may have at most
            max_model_len - 1 tokens.
        device: torch device (default: NPU, else CUDA, else CPU).
        kv_cache_memory_gib: memory for the KV cache and state pools (default: 90 % of an
            accelerator's memory minus the weights; 0.25 GiB on a CPU).
        enable_chunked_prefill, long_prefill_token_threshold: scheduler switches.
        calibration_prompts: prompts (text or token ids) for INT8 calibration.
    """

    def __init__(self, model: str | os.PathLike | None = None, dtype: str = "float32", kv_cache_dtype: str = "auto",
                 block_size: int = 16, num_blocks: int | None = None, max_num_batched_tokens: int | None = None,
                 max_num_seqs: int | None = None, enable_prefix_caching: bool = False, backend: str | None = None,
                 seed: int = 0, *, max_model_len: int | None = None, device: str | torch.device | None = None,
                 kv_cache_memory_gib: float | None = None, enable_chunked_prefill: bool = True,
                 long_prefill_token_threshold: int = 0,
                 calibration_prompts: Sequence[str | list[int]] | None = None):
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
        if max_num_batched_tokens is not None and max_num_seqs is not None and max_num_batched_tokens < max_num_seqs:
            raise ValueError(f"LLM(max_num_batched_tokens={max_num_batched_tokens}) must be >= "
                             f"max_num_seqs={max_num_seqs}: every running request may decode in one step")
        if model is None:
            from .default_model import default_model_dir

            model = default_model_dir()
        self.model_dir = os.fspath(model)
        self.device = torch.device(device) if device is not None else _default_device()
        self.dtype = DTYPES[dtype]
        self.config = Qwen35Config.from_pretrained(self.model_dir)
        if max_model_len is not None and max_model_len > self.config.max_position_embeddings:
            raise ValueError(f"LLM(max_model_len={max_model_len}) exceeds the model's max_position_embeddings="
                             f"{self.config.max_position_embeddings} (config.json)")
        weights, checkpoint_scales = load_weights(self.model_dir, self.config, self.dtype, self.device)
        self.model = Qwen35ForCausalLM(self.config, weights, backend, checkpoint_scales)
        self.backend = backend
        self._tokenizer = None
        self.seed = seed
        self._counter = itertools.count()

        memory_gib, device_name = _device_memory(self.device)
        default_tokens, default_seqs = default_batch_limits(memory_gib, device_name, "offline")
        if max_num_batched_tokens is None:
            max_num_batched_tokens = max(default_tokens, max_num_seqs or 0)
        if max_num_seqs is None:
            max_num_seqs = min(default_seqs, max_num_batched_tokens)
        if kv_cache_memory_gib is None:
            if self.device.type == "cpu":
                kv_cache_memory_gib = CPU_DEFAULT_KV_GIB
            else:
                weight_gib = sum(t.numel() * t.element_size() for t in weights.values()) / 2**30
                kv_cache_memory_gib = max(ACCELERATOR_MEMORY_UTILIZATION * memory_gib - weight_gib, 0.0)
        if isinstance(kv_cache_memory_gib, bool) or not isinstance(kv_cache_memory_gib, (int, float)) \
                or not kv_cache_memory_gib > 0:
            raise ValueError(f"LLM(kv_cache_memory_gib=...) must be a number > 0, got {kv_cache_memory_gib!r}")
        self.max_model_len = max_model_len if max_model_len is not None else self.config.max_position_embeddings
        self.kv_cache_dtype = torch.int8 if kv_cache_dtype == "int8" else self.dtype
        self.plan = plan_memory(self.config, budget_bytes=int(kv_cache_memory_gib * 2**30), block_size=block_size,
                                max_num_seqs=max_num_seqs, max_model_len=self.max_model_len, dtype=self.dtype,
                                kv_dtype=self.kv_cache_dtype, num_blocks=num_blocks)
        self.kv_cache_memory_gib = kv_cache_memory_gib

        kv_scales = None
        self.kv_scale_source = None
        if self.kv_cache_dtype == torch.int8:
            kv_scales, self.kv_scale_source = self._int8_scales(checkpoint_scales, calibration_prompts, block_size)
            logger.info("INT8 KV cache scales: %s", self.kv_scale_source)
        self.caches = allocate_caches(self.config, num_blocks=self.plan.num_blocks, block_size=block_size,
                                      num_state_slots=self.plan.num_state_slots, dtype=self.dtype,
                                      kv_dtype=self.kv_cache_dtype, device=self.device, kv_scales=kv_scales)
        self.scheduler_config = SchedulerConfig(
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=self.plan.max_num_seqs,
            block_size=block_size, num_blocks=self.plan.num_blocks, max_model_len=self.max_model_len,
            enable_chunked_prefill=enable_chunked_prefill, enable_prefix_caching=enable_prefix_caching,
            long_prefill_token_threshold=long_prefill_token_threshold,
            num_gdn_groups=_num_gdn_groups(self.config, enable_prefix_caching))
        self.scheduler = Scheduler(self.scheduler_config)
        self.input_batch = InputBatch(self.plan.max_num_seqs, -(-self.max_model_len // block_size), block_size)
        self._tracked: dict[str, _Tracked] = {}
        self.step_stats: list[StepStats] = []
        self.trace = False
        self.last_outputs: list[RequestOutput] = []
        self._warm_up()

    def _warm_up(self) -> None:
        """Run one tiny request through every path (prefill, decode, sampling) so that one-time costs
        (op registration, first kernel calls) do not land in the first user request's latency."""
        self.generate([[0, 0]], SamplingParams(max_tokens=2, temperature=1.0, detokenize=False))
        self.step_stats.clear()
        self.last_outputs = []

    # ------------------------------------------------------------------ setup

    @property
    def tokenizer(self):
        """The text tokenizer (loaded on first use: token-id prompts never need it)."""
        if self._tokenizer is None:
            from .tokenizer import TextTokenizer

            self._tokenizer = TextTokenizer.for_model(self.model_dir)
        return self._tokenizer

    def backend_summary(self) -> str:
        """Which backend the model's ops run on (printed by ``qwen-generate`` at start)."""
        return describe_backends(self.backend)

    def budget_summary(self) -> str:
        """One line with the limits and memory in use."""
        p, c = self.plan, self.scheduler_config
        kv = str(self.kv_cache_dtype).replace("torch.", "")
        return (f"max_num_batched_tokens={c.max_num_batched_tokens} max_num_seqs={c.max_num_seqs} "
                f"max_model_len={c.max_model_len} block_size={c.block_size} num_blocks={c.num_blocks} "
                f"kv_cache={kv} ({p.kv_bytes / 2**20:.1f} MiB) gdn_state_slots={p.num_state_slots} "
                f"({p.state_bytes / 2**20:.1f} MiB) budget={self.kv_cache_memory_gib:.2f} GiB device={self.device}")

    def _int8_scales(self, checkpoint_scales, calibration_prompts, block_size):
        """Per-layer (k_scale, v_scale) [Hkv, D]: the checkpoint's, else calibrated; and where they came from."""
        cfg = self.config
        shape = (cfg.num_key_value_heads, cfg.head_dim)
        layers = cfg.full_attention_layers
        names = {i: (f"layers.{i}.self_attn.k_proj.kv_cache_scale", f"layers.{i}.self_attn.v_proj.kv_cache_scale")
                 for i in layers}
        present = [n for pair in names.values() for n in pair if n in checkpoint_scales]
        if present:
            scales = {}
            for i, (kn, vn) in names.items():
                if kn not in checkpoint_scales or vn not in checkpoint_scales:
                    raise ValueError(f"checkpoint has INT8 KV scales for some layers but not {kn!r}/{vn!r}")
                scales[i] = tuple(self._as_channel_scale(checkpoint_scales[n], n, shape) for n in (kn, vn))
            return scales, "checkpoint (msModelSlim kv_cache_scale tensors)"
        prompts = list(calibration_prompts) if calibration_prompts else [self._default_calibration_tokens()]
        amax: dict[int, list[torch.Tensor]] = {}

        def observe(layer, key, value):
            found = (kv_scales_from_absmax(key), kv_scales_from_absmax(value))
            amax[layer] = found if layer not in amax else [torch.maximum(a, b) for a, b in zip(amax[layer], found)]

        total = 0
        for prompt in prompts:
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            self._check_token_ids(ids, "calibration prompt")
            total += len(ids)
            self.score(ids, kv_observer=observe, block_size=block_size)
        return ({i: tuple(amax[i]) for i in layers},
                f"calibrated from absmax over {total} tokens of {len(prompts)} prompt(s)")

    @staticmethod
    def _as_channel_scale(t: torch.Tensor, name: str, shape) -> torch.Tensor:
        t = t.to(torch.float32)
        if t.numel() == 1:
            t = t.reshape(1).expand(shape[0] * shape[1])
        if t.numel() != shape[0] * shape[1]:
            raise ValueError(f"INT8 KV scale {name!r} has shape {tuple(t.shape)}; expected one value or "
                             f"{shape[0] * shape[1]} (= Hkv * D) per-channel values")
        t = t.reshape(shape).contiguous()
        if not bool((t > 0).all()):
            raise ValueError(f"INT8 KV scale {name!r} must be > 0 everywhere")
        return t

    def _default_calibration_tokens(self) -> list[int]:
        ids = self.tokenizer.encode(CALIBRATION_TEXT * 2)
        if max(ids) < self.config.vocab_size:
            return ids
        # A vocabulary smaller than the tokenizer's (tiny test models): seeded random tokens.
        gen = torch.Generator().manual_seed(self.seed)
        return torch.randint(0, self.config.vocab_size, (len(ids),), generator=gen).tolist()

    @torch.inference_mode()
    def score(self, token_ids: list[int], *, kv_observer=None, block_size: int | None = None) -> torch.Tensor:
        """Logits [len, vocab] (float32) of every position of one prompt, as one prefill.

        Runs on temporary caches of the engine's KV dtype (model dtype before the
        INT8 scales exist), so it never touches the serving state.
        """
        self._check_token_ids(list(token_ids), "token_ids")
        bs = block_size or self.scheduler_config.block_size
        caches_ready = hasattr(self, "caches")
        kv_dtype = self.kv_cache_dtype if caches_ready else self.dtype
        scales = ({i: (self.caches.k_scales[i], self.caches.v_scales[i]) for i in self.caches.k_scales}
                  if caches_ready and kv_dtype == torch.int8 else None)
        caches = allocate_caches(self.config, num_blocks=-(-len(token_ids) // bs) + 1, block_size=bs,
                                 num_state_slots=1, dtype=self.dtype, kv_dtype=kv_dtype, device=self.device,
                                 kv_scales=scales)
        batch = ForwardBatch.single_prefill(list(token_ids), bs, self.device)
        hidden = self.model.forward(batch, caches, kv_observer=kv_observer)
        return self.model.compute_logits(hidden)

    # --------------------------------------------------------------- requests

    def _check_token_ids(self, ids: list[int], what: str) -> None:
        if not ids:
            raise ValueError(f"{what} is empty")
        if any(isinstance(t, bool) or not isinstance(t, int) for t in ids):
            raise TypeError(f"{what} must be a list of int token ids")
        lo, hi = min(ids), max(ids)
        if lo < 0 or hi >= self.config.vocab_size:
            raise ValueError(f"{what} has token id {lo if lo < 0 else hi} outside the vocabulary "
                             f"[0, {self.config.vocab_size})")

    def _prepare(self, prompt, params) -> tuple[str | None, list[int], SamplingParams]:
        if params is None:
            params = SamplingParams()
        if not isinstance(params, SamplingParams):
            raise TypeError(f"sampling_params must be a SamplingParams, got {type(params).__name__}")
        if isinstance(prompt, str):
            text, ids = prompt, self.tokenizer.encode(prompt)
        elif isinstance(prompt, (list, tuple)):
            text, ids = None, list(prompt)
        else:
            raise TypeError(f"a prompt must be a str or a list of token ids, got {type(prompt).__name__}")
        self._check_token_ids(ids, "prompt")
        if len(ids) >= self.max_model_len:
            raise ValueError(f"prompt has {len(ids)} tokens; max_model_len={self.max_model_len} leaves no room "
                             f"to generate (a prompt may have at most {self.max_model_len - 1} tokens)")
        if any(t >= self.config.vocab_size for t in params.stop_token_ids):
            raise ValueError(f"stop_token_ids must be < vocab_size={self.config.vocab_size}")
        return text, ids, params

    def add_request(self, prompt: str | list[int], sampling_params: SamplingParams | None = None,
                    request_id: str | None = None) -> str:
        """Queue one request; returns its id. A bad prompt or setting raises here and queues nothing."""
        text, ids, params = self._prepare(prompt, sampling_params)
        request_id = request_id if request_id is not None else f"req-{next(self._counter)}"
        if request_id in self._tracked:
            raise ValueError(f"request_id {request_id!r} is already in use")
        eos = list(self.config.eos_token_id)
        request = Request(request_id, ids, params.max_tokens, eos_token_id=eos[0] if eos else None,
                          stop_token_ids=list(params.stop_token_ids) + ([] if params.ignore_eos else eos[1:]),
                          ignore_eos=params.ignore_eos)
        self.scheduler.add_request(request)
        gen = torch.Generator(device=self.device)
        gen.manual_seed(params.seed if params.seed is not None else _derived_seed(self.seed, request_id))
        self._tracked[request_id] = _Tracked(request_id, text, ids, params, gen, time.perf_counter(),
                                             logprobs=[] if params.logprobs is not None else None)
        return request_id

    def abort_request(self, request_id: str) -> bool:
        """Stop a request; its output ends with finish_reason "abort". False if unknown or finished."""
        tracked = self._tracked.get(request_id)
        if tracked is None or tracked.finish_reason is not None or not self.scheduler.abort_request(request_id):
            return False
        tracked.finish_reason, tracked.finish_time = "abort", time.perf_counter()
        return True

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    # ------------------------------------------------------------------- step

    def step(self) -> list[str]:
        """Run one engine step; returns the ids of requests that got tokens or finished in it."""
        start = time.perf_counter()
        out = self.scheduler.schedule()
        self.input_batch.update(out, self._sampling_state)
        if out.total_num_scheduled_tokens == 0:
            return []
        prepared = self.input_batch.prepare(out, self.device)
        batch = prepared.batch
        hidden = self.model.forward(batch, self.caches)
        sampled: dict[str, list[int]] = {}
        logprobs: dict[str, dict[int, float] | None] = {}
        if prepared.sampling_req_ids:
            logits = self.model.compute_logits(hidden.index_select(0, batch.logits_indices))
            tokens, lps = sample(logits, prepared.params, prepared.generators)
            for r, tok, lp in zip(prepared.sampling_req_ids, tokens, lps):
                sampled[r], logprobs[r] = [tok], lp
        results = self.scheduler.update_from_output(out, sampled)
        now = time.perf_counter()
        changed = []
        for res in results:
            tracked = self._tracked[res.request_id]
            if res.new_token_ids:
                tracked.token_ids.extend(res.new_token_ids)
                if tracked.logprobs is not None:
                    tracked.logprobs.append(logprobs[res.request_id])
                if tracked.first_token_time is None:
                    tracked.first_token_time = now
            if res.finished:
                tracked.finish_reason, tracked.stop_reason, tracked.finish_time = \
                    res.finish_reason, res.stop_reason, now
            changed.append(res.request_id)
        stats = StepStats(len(self.step_stats), out.total_num_scheduled_tokens, batch.num_decodes,
                          prepared.num_prefills, len(sampled), len(out.preempted_req_ids), out.num_free_blocks,
                          now - start)
        self.step_stats.append(stats)
        if self.trace:
            print(stats.line(), flush=True)
        return changed

    def _output(self, request_id: str, *, forget: bool) -> RequestOutput:
        t = self._tracked[request_id]
        detok = t.params.detokenize
        completion = CompletionOutput(0, self.tokenizer.decode(t.token_ids) if detok else "", list(t.token_ids),
                                      t.finish_reason, t.stop_reason, t.logprobs)
        metrics = {"arrival_time": t.arrival, "first_token_time": t.first_token_time,
                   "finished_time": t.finish_time}
        if forget:
            self._forget(request_id)
        return RequestOutput(request_id, t.prompt, t.prompt_token_ids, [completion], t.finish_reason is not None,
                             metrics)

    def _sampling_state(self, request_id: str) -> tuple[SamplingParams, torch.Generator]:
        """What the persistent batch copies into a joining request's row."""
        tracked = self._tracked[request_id]
        return tracked.params, tracked.generator

    def _forget(self, request_id: str) -> None:
        self._tracked.pop(request_id, None)

    def _run_until_done(self, request_ids: list[str]) -> Iterator[list[str]]:
        pending = set(request_ids)
        try:
            while pending:
                if not self.scheduler.has_unfinished_requests():
                    raise RuntimeError(f"requests {sorted(pending)} are neither running nor waiting")
                changed = self.step()
                yield changed
                pending -= {r for r in changed if self._tracked[r].finish_reason is not None}
                pending -= {r for r in pending if self._tracked[r].finish_reason is not None}  # aborted
        except BaseException:
            for r in pending:  # leave nothing half-served behind (e.g. on KeyboardInterrupt)
                self.abort_request(r)
            raise

    def _add_all(self, prompts, sampling_params) -> list[str]:
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = list(prompts)
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != len(prompts):
                raise ValueError(f"got {len(sampling_params)} sampling_params for {len(prompts)} prompts")
            params = list(sampling_params)
        else:
            params = [sampling_params] * len(prompts)
        prepared = [self._prepare(p, s) for p, s in zip(prompts, params)]  # all checked before any is queued
        return [self.add_request(ids if text is None else text, s) for text, ids, s in prepared]

    def generate(self, prompts: str | list[int] | Iterable[str | list[int]],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = False) -> list[RequestOutput]:
        """Generate for every prompt (text or token ids); outputs in prompt order.

        Every prompt is checked before any is queued, so a bad one raises
        ``ValueError``/``TypeError`` and leaves the engine serving as before.
        """
        ids = self._add_all(prompts, sampling_params)
        bar = None
        if use_tqdm:
            from tqdm import tqdm

            bar = tqdm(total=len(ids), desc="Generating", unit="req")
        for changed in self._run_until_done(ids):
            if bar is not None:
                bar.update(sum(1 for r in changed if r in ids and self._tracked[r].finish_reason is not None))
        if bar is not None:
            bar.close()
        self.last_outputs = [self._output(r, forget=True) for r in ids]
        return self.last_outputs

    def stream(self, prompts, sampling_params=None) -> Iterator[StreamOutput]:
        """Generate, yielding each request's new tokens (and text) as soon as a step produces them.

        When the iterator is exhausted, ``last_outputs`` holds the full ``RequestOutput`` list.
        """
        ids = self._add_all(prompts, sampling_params)
        index = {r: i for i, r in enumerate(ids)}
        for changed in self._run_until_done(ids):
            for r in changed:
                yield self._delta(r, index[r])
        self.last_outputs = [self._output(r, forget=True) for r in ids]

    def _delta(self, request_id: str, index: int) -> StreamOutput:
        t = self._tracked[request_id]
        new_tokens = t.token_ids[t.streamed_tokens:]
        t.streamed_tokens = len(t.token_ids)
        new_text = ""
        if t.params.detokenize:
            text = self.tokenizer.decode(t.token_ids)
            # Hold back a trailing partial UTF-8 character until its other bytes arrive.
            if t.finish_reason is not None or not text.endswith("\ufffd"):
                new_text, t.streamed_text = text[len(t.streamed_text):], text
        return StreamOutput(index, request_id, new_tokens, new_text, t.finish_reason is not None, t.finish_reason)


def _num_gdn_groups(config, enable_prefix_caching: bool) -> int:
    """vLLM's GDN KV cache groups: the GDN layers in groups of as many layers as there are
    full-attention layers (3 for Qwen3.5's 3:1 layout). Refuses prefix caching, whose GDN
    states the model does not read from the pool's pages yet (issue 11, model side)."""
    if enable_prefix_caching:
        raise ValueError(
            "LLM(enable_prefix_caching=True) is not supported yet: the scheduler caches GDN states "
            "in vLLM's align mode, but the model still keeps them outside the KV pool's pages"
        )
    num_attention = max(len(config.full_attention_layers), 1)
    return -(-len(config.linear_attention_layers) // num_attention)
