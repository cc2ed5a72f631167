"""The engine: requests in, ``step()`` out, as vLLM's ``LLMEngine``; ``LLM`` (``llm.py``) sits on top.

Each ``step()`` is schedule -> execute -> update: the scheduler decides what
every request advances, the model runner (``worker/model_runner.py``) runs that step
and samples, the scheduler applies the sampled tokens, and the engine returns
the ``RequestOutput`` of every request that got tokens or finished in the step.
The engine holds each request's record from ``add_request`` to its end; the
outputs are in ``outputs.py``, INT8 KV-scale calibration in ``loading/kv_scales.py``.
Its arguments are checked and resolved, and the memory planned, by
``EngineConfig`` (``engine_config.py``) before anything is built.

Example::

    from qwen_ops.model.engine import LLMEngine
    from qwen_ops import SamplingParams
    engine = LLMEngine()              # the built-in tiny model; or LLMEngine("path/to/Qwen3.5")
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=8, temperature=0))
    while engine.has_unfinished_requests():
        for out in engine.step():
            print(out.request_id, out.outputs[0].token_ids, out.finished)
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import os
import time
from dataclasses import dataclass, field

import torch

from ...scheduling import Request, Scheduler
from ..loading.huge_pages import move_weights_to_huge_pages
from ..loading.kv_scales import CALIBRATION_TEXT, calibrate_kv_scales, checkpoint_kv_scales
from ..loading.weights import load_weights
from ..network.backends import describe as describe_backends
from ..network.mtp import Qwen35MTP
from ..network.qwen3_5 import Qwen35ForCausalLM
from ..sample.sampling import SamplingParams
from ..worker.model_runner import ModelRunner
from .engine_config import EngineConfig
from .outputs import CompletionOutput, RequestOutput, StepStats
from .step_failure import MAX_CONSECUTIVE_STEP_FAILURES, StepFailedError

logger = logging.getLogger("qwen_ops.engine")

__all__ = ["LLMEngine", "EngineConfig", "StepFailedError"]


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
    num_cached_tokens: int | None = None  # the prefix-cache hit at first admission (vLLM's rule)
    prefix_hit_reason: str = ""  # why that hit stopped where it did (scheduling.gdn_checkpoints.HIT_REASONS)


def _derived_seed(seed: int, request_id: str) -> int:
    """A request's seed when it has none: fixed by the engine seed and its id (Python's hash() is not)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{request_id}".encode()).digest()[:8], "little") % 2**63


class LLMEngine:
    """The engine of a Qwen3.5 checkpoint: continuous batching and one page pool for the KV
    cache and the GDN states (vLLM's hybrid layout, ``worker/gdn_pages.py``).

    Args:
        model: a directory with config.json and safetensors weights (a text-only
            ``qwen3_5_text`` or multimodal ``qwen3_5`` checkpoint); None: the
            built-in tiny random model (see ``qwen_ops.model.loading.default_model``); or an
            ``EngineConfig`` made by ``EngineConfig.from_args`` (then no other argument).
        dtype: "float32", "float16" or "bfloat16" (weights and activations).
        kv_cache_dtype: "auto" (the model dtype) or "int8" (per-channel scales
            from the checkpoint's msModelSlim ``kv_cache_scale`` tensors, else
            from a calibration pass; ``kv_scale_source`` says which).
        block_size: tokens per KV block (int >= 1; default 16, vLLM's). The pool's block size is
            then raised, as vLLM 0.33 does for hybrid models, in steps of block_size until one
            attention layer's page (K and V of a block, in the KV cache dtype: an int8 cache needs
            twice the tokens) holds one GDN layer's conv + float32 recurrent state
            (``kv_cache.pool_block_size``); ``budget_summary()`` says when it was raised.
        num_blocks: KV blocks including the null block 0 (int >= 2; default: from the memory budget).
        max_num_batched_tokens, max_num_seqs: step limits, ints >= 1 with
            max_num_batched_tokens >= max_num_seqs (default: the scheduler's
            ``default_batch_limits`` for this device, offline usage, adjusted to
            that rule).
        enable_prefix_caching: reuse cached prefixes: attention blocks and, on a hybrid model, GDN
            states (how: ``mamba_cache_mode``). None (default): on, as vLLM 0.33 turns it on by default for
            generative hybrid models, with speculative decoding too (then a hit stops one block short,
            vLLM's rule for EAGLE/MTP drafters). Needs chunked prefill (ValueError otherwise).
            ``RequestOutput.num_cached_tokens`` is each request's hit.
        mamba_cache_mode: how a hybrid model caches GDN states with prefix caching (vLLM's spelling).
            None (default): "chunk" with prefix caching, "none" without. "chunk": the block stays
            ``block_size``, GDN states are checkpointed every lcm(64, block_size) tokens in a pool of
            ``gdn_checkpoint_memory_share`` of the budget, outside the page pool
            (``scheduling/gdn_checkpoints.py``). "align": vLLM 0.33's mode, step-identical to its
            scheduler: GDN states at block-aligned chunk ends in the pool's pages
            (``worker/gdn_pages.py``), the block raised until an attention page holds a GDN page.
        backend: the ops backend ("torch", "triton", "ascendc"; None: by device). Ops the
            chosen backend does not implement run on the device's default backend
            (``backend_summary()`` says which).
        seed: seeds the sampling of requests that have no seed of their own.
        max_model_len: longest sequence, prompt plus generated tokens (int >= 2, at most the
            config's max_position_embeddings). Default: the config's max_position_embeddings,
            or, when one request that long does not fit the memory budget, the longest that
            does (logged, and said by ``budget_summary()``). A prompt may have at most
            max_model_len - 1 tokens.
        device: torch device (default: NPU, else CUDA, else CPU).
        kv_cache_memory_gib: memory for the page pool, KV pages and GDN states (default: 90 % of an
            accelerator's memory minus the weights; on a CPU a tenth of the memory available
            when the engine's config is resolved, before the weights load).
        enable_chunked_prefill, long_prefill_token_threshold: scheduler switches.
        calibration_prompts: prompts (text or token ids) for INT8 calibration.
        speculative_config: None, or ``{"method": "mtp", "num_speculative_tokens": k}`` (vLLM's
            spelling): the checkpoint's MTP head drafts k tokens a step and one target forward verifies
            them (``spec_decode/drafter.py``): greedy and sampled requests (drafts are greedy, as vLLM's default
            ``draft_sample_method``), logprobs, any prompt length, either KV cache dtype (an int8 one
            calibrates the MTP layers' scales), with or without prefix caching. Statistics in
            ``RequestOutput.metrics`` (``spec_*``).
        quantization: INT8 projections (``loading/quantization.py``): None (default) loads msModelSlim's W8A8 /
            W8A8_DYNAMIC checkpoints when the directory has its ``quant_model_description.json`` (vllm-ascend's
            ``"ascend"``) and float weights otherwise; ``"ascend"`` requires that file; ``"int8_weight_only"``
            quantizes a float checkpoint's projections per output channel at load (activations stay float).
            ``budget_summary()`` says which and counts the INT8 weights' bytes.
    """

    # A request whose steps fail this many times in a row ends with finish_reason "error" (``step_failure.py``).
    max_consecutive_step_failures = MAX_CONSECUTIVE_STEP_FAILURES

    def __init__(self, model: str | os.PathLike | EngineConfig | None = None, *args, **kwargs):
        # The arguments are checked and resolved, and the memory planned, before anything is built.
        if isinstance(model, EngineConfig):
            if args or kwargs:
                raise TypeError("LLMEngine(EngineConfig) takes no other arguments: they are in the config")
            engine_config = model
        else:
            engine_config = EngineConfig.from_args(model, *args, **kwargs)
        c = self.engine_config = engine_config
        # The resolved settings, under the names the engine has always had.
        self.model_dir, self.config, self.device, self.dtype = c.model_dir, c.config, c.device, c.dtype
        self.kv_cache_dtype, self.backend, self.seed = c.kv_cache_dtype, c.backend, c.seed
        self.speculative_config, self.enable_prefix_caching = c.speculative_config, c.enable_prefix_caching
        self.max_model_len, self.plan, self.kv_cache_memory_gib = c.max_model_len, c.plan, c.kv_cache_memory_gib
        self.scheduler_config = c.scheduler_config

        weights, checkpoint_scales = load_weights(self.model_dir, self.config, self.dtype, self.device,
                                                  c.quantization)
        if torch.device(self.device).type == "cpu":  # a decode step streams them: 2 MB pages read faster
            weights, moved = move_weights_to_huge_pages(weights)
            if moved:
                logger.info("weights in transparent huge pages: %.2f GiB", moved / 2**30)
        self.model = Qwen35ForCausalLM(self.config, weights, self.backend, checkpoint_scales)
        self.model_runner = ModelRunner(self.model, self.config, self.device, self.backend)
        if self.speculative_config is not None:  # the MTP drafter, loaded into the model runner
            self.model_runner.enable_speculation(Qwen35MTP.from_pretrained(self.model_dir, self.model, self.backend),
                                                 self.num_speculative_tokens)
        if not c.enforce_eager:
            self.model_runner.enable_graphs(backend=c.compile_backend, max_capture_size=c.max_capture_size)
        self._tokenizer = None
        self._counter = itertools.count()

        kv_scales = None
        self.kv_scale_source = None
        if self.kv_cache_dtype == torch.int8:
            kv_scales, self.kv_scale_source = self._int8_scales(checkpoint_scales, c.calibration_prompts,
                                                                c.block_size)
            logger.info("INT8 KV cache scales: %s", self.kv_scale_source)
        self.model_runner.initialize_caches(self.plan, block_size=c.block_size, max_model_len=self.max_model_len,
                                            kv_dtype=self.kv_cache_dtype, kv_scales=kv_scales,
                                            enable_prefix_caching=self.enable_prefix_caching)
        self.scheduler = Scheduler(self.scheduler_config)
        self.model_runner.token_at = lambda request_id, position: \
            self.scheduler.requests[request_id].all_token_ids[position]
        self._tracked: dict[str, _Tracked] = {}
        # Requests that ended in a failed step (with "error", or finished before it failed), whose outputs
        # the next step gives (``step_failure.py``).
        self._undelivered: list[str] = []
        self.step_stats: list[StepStats] = []
        self.trace = False
        self.model_runner.warm_up()

    # ------------------------------------------------------------------ setup

    @property
    def num_speculative_tokens(self) -> int:
        return self.engine_config.num_speculative_tokens

    @property
    def caches(self):
        return self.model_runner.caches

    @property
    def input_batch(self):
        return self.model_runner.input_batch

    @property
    def tokenizer(self):
        """The text tokenizer (loaded on first use: token-id prompts never need it)."""
        if self._tokenizer is None:
            from ..loading.tokenizer import TextTokenizer

            self._tokenizer = TextTokenizer.for_model(self.model_dir)
        return self._tokenizer

    def backend_summary(self) -> str:
        """Which backend the model's ops run on (printed by ``qwen-generate`` at start)."""
        return describe_backends(self.backend, is_moe=self.config.is_moe)

    def budget_summary(self) -> str:
        """One line with the limits and memory in use (``EngineConfig.describe``)."""
        return self.engine_config.describe()

    def _int8_scales(self, checkpoint_scales, calibration_prompts, block_size):
        """Per-layer (k_scale, v_scale) [Hkv, D]: the checkpoint's, else calibrated; and where they came from.

        With MTP speculation the head's layers (KV layer ids ``num_hidden_layers + i``) are always calibrated,
        on the same prompts, by the head run over the target's hidden states of each prompt (``spec_decode``)."""
        scales = checkpoint_kv_scales(self.config, checkpoint_scales)
        token_lists = None
        if scales is not None:
            source = "checkpoint (msModelSlim kv_cache_scale tensors)"
        else:
            token_lists = self._calibration_token_lists(calibration_prompts)
            scales, total = calibrate_kv_scales(
                self.config, token_lists,
                lambda ids, observe: self.score(ids, kv_observer=observe, block_size=block_size))
            source = f"calibrated from absmax over {total} tokens of {len(token_lists)} prompt(s)"
        spec = self.model_runner.spec
        if spec is not None:
            token_lists = token_lists or self._calibration_token_lists(calibration_prompts)
            mtp_scales, total = calibrate_kv_scales(
                self.config, token_lists,
                lambda ids, observe: self.model_runner.observe_mtp_calibration_kv(ids, observe, block_size),
                layers=spec.mtp.layer_ids)
            scales = {**scales, **mtp_scales}
            source += f"; MTP layer(s) calibrated from absmax over {total} tokens"
        return scales, source

    def _calibration_token_lists(self, calibration_prompts) -> list[list[int]]:
        prompts = list(calibration_prompts) if calibration_prompts else [self._default_calibration_tokens()]
        token_lists = []
        for prompt in prompts:
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            self._check_token_ids(ids, "calibration prompt")
            token_lists.append(ids)
        return token_lists

    def _default_calibration_tokens(self) -> list[int]:
        ids = self.tokenizer.encode(CALIBRATION_TEXT * 2)
        if max(ids) < self.config.vocab_size:
            return ids
        # A vocabulary smaller than the tokenizer's (tiny test models): seeded random tokens.
        gen = torch.Generator().manual_seed(self.seed)
        return torch.randint(0, self.config.vocab_size, (len(ids),), generator=gen).tolist()

    def score(self, token_ids: list[int], *, kv_observer=None, block_size: int | None = None) -> torch.Tensor:
        """Logits [len, vocab] (float32) of every position of one prompt, as one prefill.

        Runs on temporary caches of the engine's KV dtype (model dtype before the
        INT8 scales exist), so it never touches the serving state.
        """
        self._check_token_ids(list(token_ids), "token_ids")
        caches = self.caches
        kv_dtype = self.kv_cache_dtype if caches is not None else self.dtype
        scales = ({i: (caches.k_scales[i], caches.v_scales[i]) for i in caches.k_scales}
                  if caches is not None and kv_dtype == torch.int8 else None)
        return self.model_runner.score(list(token_ids), kv_observer=kv_observer,
                                       block_size=block_size or self.scheduler_config.block_size,
                                       kv_dtype=kv_dtype, kv_scales=scales)

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
        self.model_runner.add_request(request_id, params, gen)
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
        """Whether a request is waiting or running, or ended in a failed step with its output not given yet."""
        return self.scheduler.has_unfinished_requests() or bool(self._undelivered)

    # ------------------------------------------------------------------- step

    def step(self) -> list[RequestOutput]:
        """Run one engine step: schedule -> execute -> update.

        Returns the ``RequestOutput`` of each request that got tokens or finished
        in this step (its tokens so far; ``finished`` tells which), as vLLM's
        ``LLMEngine.step()``. A finished request's record stays until its output
        is taken with ``_output(request_id, forget=True)`` (``generate``/``stream`` do).

        A step is all or nothing: if any stage raises, the step's requests are rolled back (retried from a
        re-prefill, or ended with finish_reason "error" after ``max_consecutive_step_failures`` failed steps
        in a row) and ``StepFailedError`` is raised from the original exception, once; the next step
        serves on and its list starts with the outputs of the requests that ended in the failed step.
        """
        start = time.perf_counter()
        stage, scheduler_output = "schedule", None
        try:
            scheduler_output = self.scheduler.schedule()
            for request_id, hit in scheduler_output.num_cached_tokens.items():
                tracked = self._tracked.get(request_id)
                if tracked is not None and tracked.num_cached_tokens is None:
                    tracked.num_cached_tokens = hit  # vLLM keeps the first admission's hit, not a resumed one's
                    tracked.prefix_hit_reason = scheduler_output.prefix_hit_reasons.get(request_id, "")
            stage = "execute"
            runner_output = self.model_runner.execute(scheduler_output)
            changed = []
            if scheduler_output.total_num_scheduled_tokens:
                stage = "update"
                results = self.scheduler.update_from_output(scheduler_output, runner_output.sampled_token_ids)
                if runner_output.draft_token_ids:
                    self.scheduler.update_draft_token_ids(runner_output.draft_token_ids)
                stage = "output"
                now = time.perf_counter()
                changed = [self._apply(result, runner_output.logprobs, now) for result in results]
            outputs = [self._output(request_id, forget=False) for request_id in (*self._undelivered, *changed)]
        except Exception as error:
            raise self._fail_step(scheduler_output, self.model_runner.stage if stage == "execute" else stage,
                                  error) from error
        self._undelivered = []
        if self.scheduler.step_failures:  # after a failed step: its requests that stepped fine now
            self.scheduler.step_succeeded(scheduler_output)
        if scheduler_output.total_num_scheduled_tokens:
            self._record(scheduler_output, runner_output, time.perf_counter() - start)
        return outputs

    def _fail_step(self, scheduler_output, stage: str, error: Exception) -> StepFailedError:
        """Roll back a step that raised at ``stage`` (``scheduler_output``: None if schedule() raised) and
        return the StepFailedError that says so.

        The requests it touched are the step's scheduled ones that have not ended (all unfinished ones when
        scheduling raised). Each drops what the step gave it (a sampled token applied before the raise
        included: its generator is rewound too, so a retry draws it again) and is rolled back by the
        scheduler and the model runner, or ends with "error" on its ``max_consecutive_step_failures``-th
        failed step in a row. Requests the step finished before it raised keep their end; their outputs,
        and those of the errored ones, open the next step's list."""
        tracked = self._tracked
        if scheduler_output is None:
            touched = list(self.scheduler.requests)
            ended = []
        else:
            scheduled = scheduler_output.num_scheduled_tokens
            touched = [r for r in scheduled if r in tracked and tracked[r].finish_reason is None]
            ended = [r for r in scheduled if r in tracked and tracked[r].finish_reason is not None]
        num_outputs = {}
        for request_id in touched:
            record = tracked[request_id]
            keep = len(record.token_ids)
            if scheduler_output is not None and request_id in scheduler_output.sampling_req_ids:
                # Its tokens before the step: the step's known tokens end there (drafts come after them).
                known_end = (scheduler_output.num_computed_tokens[request_id] + scheduled[request_id]
                             - len(scheduler_output.scheduled_spec_decode_tokens.get(request_id, ())))
                keep = min(keep, known_end - len(record.prompt_token_ids))
            del record.token_ids[keep:]
            if record.logprobs is not None:
                del record.logprobs[keep:]
            if not record.token_ids:
                record.first_token_time = None
            num_outputs[request_id] = keep
        errored = self.scheduler.rollback_step(scheduler_output, num_outputs, self.max_consecutive_step_failures)
        self.model_runner.discard_step(scheduler_output, touched)
        now = time.perf_counter()
        for request_id in errored:
            tracked[request_id].finish_reason, tracked[request_id].finish_time = "error", now
        self._undelivered += [r for r in (*ended, *errored) if r not in self._undelivered]
        logger.warning("engine step failed at %r: %s: %s; retrying %d request(s), ended %s with 'error'",
                       stage, type(error).__name__, error, len(touched) - len(errored), errored)
        return StepFailedError(stage, touched, errored, error)

    def _apply(self, result, logprobs: dict, now: float) -> str:
        """Record one request's new tokens and end; returns its id."""
        tracked = self._tracked[result.request_id]
        if result.new_token_ids:
            tracked.token_ids.extend(result.new_token_ids)
            if tracked.logprobs is not None:
                step_logprobs = logprobs[result.request_id]
                if isinstance(step_logprobs, list):  # speculation: one per sampled token; keep the kept tokens'
                    tracked.logprobs.extend(step_logprobs[:len(result.new_token_ids)])
                else:
                    tracked.logprobs.append(step_logprobs)
            if tracked.first_token_time is None:
                tracked.first_token_time = now
        if result.finished:
            tracked.finish_reason, tracked.stop_reason, tracked.finish_time = \
                result.finish_reason, result.stop_reason, now
        return result.request_id

    def _record(self, scheduler_output, runner_output, seconds: float) -> None:
        stats = StepStats(len(self.step_stats), scheduler_output.total_num_scheduled_tokens,
                          runner_output.num_decodes, runner_output.num_prefills,
                          len(runner_output.sampled_token_ids), len(scheduler_output.preempted_req_ids),
                          scheduler_output.num_free_blocks, seconds)
        self.step_stats.append(stats)
        if self.trace:
            print(stats.line(), flush=True)

    def is_finished(self, request_id: str) -> bool:
        """Whether a tracked request has ended (stopped, reached its length or was aborted)."""
        return self._tracked[request_id].finish_reason is not None

    def _output(self, request_id: str, *, forget: bool) -> RequestOutput:
        t = self._tracked[request_id]
        detok = t.params.detokenize
        completion = CompletionOutput(0, self.tokenizer.decode(t.token_ids) if detok else "", list(t.token_ids),
                                      t.finish_reason, t.stop_reason,
                                      list(t.logprobs) if t.logprobs is not None else None)
        metrics = {"arrival_time": t.arrival, "first_token_time": t.first_token_time,
                   "finished_time": t.finish_time}
        if t.prefix_hit_reason:  # a hybrid model with prefix caching: why the hit stopped where it did
            metrics["num_cached_tokens"] = t.num_cached_tokens or 0
            metrics["prefix_hit_reason"] = t.prefix_hit_reason
        spec = self.model_runner.spec
        if spec is not None:
            metrics.update(spec.request_stats(request_id).as_metrics())
            if forget:
                spec.stats.pop(request_id, None)
        if forget:
            self._tracked.pop(request_id, None)
        return RequestOutput(request_id, t.prompt, t.prompt_token_ids, [completion], t.finish_reason is not None,
                             metrics, num_cached_tokens=t.num_cached_tokens or 0)

