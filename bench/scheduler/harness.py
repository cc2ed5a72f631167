"""Drive qwen_ops' scheduler and vLLM's (when installed) through identical workloads.

Shared by compare_vllm.py and bench_scheduler.py. A workload is plain data
(config dict, request specs, aborts); the "model" is a deterministic function of
(request id, position), so both schedulers see exactly the same sampled tokens
and draft tokens.
"""

import hashlib
import importlib.util
import json
import math
import os
import random
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_package_copy(directory: str, name: str = "baseline_scheduling"):
    """Import another copy of the scheduling package (e.g. the code before a change, from
    `git archive BASE scheduling | tar -x -C /tmp/before`) under its own module name, so that
    it runs beside the current one in the same process."""
    spec = importlib.util.spec_from_file_location(
        name, Path(directory) / "__init__.py", submodule_search_locations=[str(directory)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_ours():
    """Import this checkout's qwen_ops.scheduling: the installed package when it is this checkout's,
    else the checkout's files (an interpreter with another copy installed, e.g. the CI's vLLM venv,
    or none, would otherwise compare the wrong code)."""
    try:
        import qwen_ops.scheduling as scheduling

        if Path(scheduling.__file__).resolve().parent == REPO / "scheduling":
            return scheduling
    except ImportError:
        pass
    for name in [m for m in sys.modules if m == "qwen_ops" or m.startswith("qwen_ops.")]:
        del sys.modules[name]
    parent = sys.modules.setdefault("qwen_ops", types.ModuleType("qwen_ops"))
    parent.__path__ = getattr(parent, "__path__", [])
    spec = importlib.util.spec_from_file_location(
        "qwen_ops.scheduling", REPO / "scheduling" / "__init__.py", submodule_search_locations=[str(REPO / "scheduling")]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["qwen_ops.scheduling"] = module
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- workloads

VOCAB = 64
EOS = 0


@dataclass
class RequestSpec:
    request_id: str
    prompt: list[int]
    max_tokens: int
    arrival_step: int
    priority: int = 0
    ignore_eos: bool = False
    stop_token_ids: tuple = ()


@dataclass
class Workload:
    config: dict
    requests: list[RequestSpec]
    aborts: dict[int, list[str]] = field(default_factory=dict)  # step -> request ids


def model_token(request_id: str, position: int, salt: str = "") -> int:
    """The deterministic 'model': the token at `position` of a request."""
    digest = hashlib.blake2b(f"{salt}{request_id}:{position}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") % VOCAB


def num_accepted(request_id: str, position: int, num_drafts: int) -> int:
    """How many of the drafts the 'model' accepts."""
    return model_token(request_id, position, "accept") % (num_drafts + 1)


def random_workload(rng: random.Random) -> Workload:
    """A random small configuration and workload, valid for vLLM's config checks too."""
    block_size = rng.choice([1, 2, 4, 8, 16])
    max_model_len = rng.randint(16, 160)
    max_num_seqs = rng.randint(1, 8)
    chunked = rng.random() < 0.8
    budget = rng.randint(max(max_num_seqs, 4), 96)
    if not chunked:
        budget = max(budget, max_model_len)
    spec_tokens = rng.choice([0, 0, 0, 1, 2, 3]) if budget > 4 else 0
    blocks_for_one = -(-(max_model_len + spec_tokens) // block_size)
    # At least room for one request of max_model_len: qwen_ops refuses a request that could
    # outgrow the whole cache (vLLM checks the same at start-up).
    num_blocks = 1 + rng.randint(blocks_for_one, blocks_for_one * rng.choice([1, 2, 4]))
    config = dict(
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        num_blocks=num_blocks,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=rng.random() < 0.5,
        policy=rng.choice(["fcfs", "priority"]),
        long_prefill_token_threshold=rng.choice([0, 0, rng.randint(1, max_model_len)]),
        reserve_full_prompt=rng.random() < 0.7,
        num_speculative_tokens=spec_tokens,
    )
    bases = [[rng.randrange(1, VOCAB) for _ in range(max_model_len)] for _ in range(3)]
    requests = []
    for i in range(rng.randint(1, 14)):
        length = rng.randint(1, max_model_len - 1)
        shared = rng.randint(0, length) if rng.random() < 0.6 else 0
        prompt = bases[rng.randrange(3)][:shared] + [rng.randrange(1, VOCAB) for _ in range(length - shared)]
        requests.append(
            RequestSpec(
                request_id=f"r{i}",
                prompt=prompt,
                max_tokens=rng.randint(1, 40),
                arrival_step=rng.choice([0, 0, rng.randint(0, 30)]),
                priority=rng.randint(0, 2),
                ignore_eos=rng.random() < 0.5,
                stop_token_ids=(rng.randrange(1, VOCAB),) if rng.random() < 0.3 else (),
            )
        )
    aborts = {}
    for spec in requests:
        if rng.random() < 0.1:
            aborts.setdefault(spec.arrival_step + rng.randint(0, 20), []).append(spec.request_id)
    return Workload(config, requests, aborts)


def random_hybrid_workload(rng: random.Random) -> Workload:
    """A random workload on a hybrid (GDN + attention) model: random_workload's, plus 1-3 GDN groups.

    Without prefix caching each request holds one GDN page per group (plus the
    speculative ones); with it (vLLM's "align" mode, which needs chunked
    prefill) at most two (plus those). The pool is sized so that one request of
    max_model_len fits, up to 4x that: small pools preempt. A quarter of them use
    blocks of 32 or 64 tokens, often wider than the token budget.
    """
    workload = random_workload(rng)
    config = workload.config
    groups = rng.choice([1, 2, 3])
    config["num_gdn_groups"] = groups
    if config["enable_prefix_caching"]:
        config["enable_chunked_prefill"] = True
    if rng.random() < 0.25:
        # Blocks wider than many budgets: align-mode chunks that end mid-block and re-align.
        config["block_size"] = rng.choice([32, 64])
    spec_tokens = config["num_speculative_tokens"]
    if spec_tokens and rng.random() < 0.5:
        # As an MTP head would: KV slots reserved past the drafts (else ngram's none).
        config["num_lookahead_tokens"] = spec_tokens
    pages = groups * ((2 if config["enable_prefix_caching"] else 1) + spec_tokens)
    blocks_for_one = -(-(config["max_model_len"] + spec_tokens) // config["block_size"]) + pages
    config["num_blocks"] = 1 + rng.randint(blocks_for_one, blocks_for_one * rng.choice([1, 1, 2, 4]))
    # More reuse than random_workload: a GDN hit needs a state cached at exactly the hit's end,
    # so repeat earlier prompts whole, cut at or off a block boundary, or extended.
    specs = workload.requests
    for i in range(1, len(specs)):
        if rng.random() < 0.5:
            earlier = specs[rng.randrange(i)].prompt
            cut = rng.choice([len(earlier), rng.randint(1, len(earlier)),
                              len(earlier) // config["block_size"] * config["block_size"]])
            tail = [rng.randrange(1, VOCAB) for _ in range(rng.choice([0, 1, rng.randint(1, 40)]))]
            prompt = (earlier[:cut] + tail)[: config["max_model_len"] - 1] or [1]
            specs[i].prompt = prompt
            if rng.random() < 0.5:
                specs[i].arrival_step = specs[rng.randrange(i)].arrival_step  # same-step arrivals
    return workload


def decode_workload(num_requests: int, prompt_len: int = 512, max_tokens: int = 600,
                    gdn_groups: int = 0, prefix_caching: bool = True) -> Workload:
    """num_requests requests that all reach decode and stay there (benchmark); gdn_groups > 0: a
    hybrid model (prefix caching on: align mode, two GDN pages per group per request; off: "none"
    mode, one page per group)."""
    block_size = 128
    # Room for every request's longest sequence: the scheduler refuses a request that could
    # outgrow the whole cache (timed runs stay below max_tokens decode steps).
    per_request = -(-(prompt_len + max_tokens) // block_size) + 1 + 2 * gdn_groups
    config = dict(
        max_num_batched_tokens=max(16384, num_requests),
        max_num_seqs=num_requests,
        block_size=block_size,
        num_blocks=1 + num_requests * per_request,
        max_model_len=prompt_len + max_tokens + 1,
        enable_chunked_prefill=True,
        enable_prefix_caching=prefix_caching,
        policy="fcfs",
        long_prefill_token_threshold=0,
        reserve_full_prompt=True,
        num_speculative_tokens=0,
    )
    if gdn_groups:
        config["num_gdn_groups"] = gdn_groups
    rng = random.Random(0)
    requests = [
        RequestSpec(f"r{i}", [rng.randrange(1, VOCAB) for _ in range(prompt_len)], max_tokens, 0, ignore_eos=True)
        for i in range(num_requests)
    ]
    return Workload(config, requests)


# ------------------------------------------------------------------ drivers


class OursDriver:
    """qwen_ops.scheduling behind the common driver interface."""

    name = "qwen_ops"

    def __init__(self, config: dict, module=None):
        self.mod = module if module is not None else load_ours()  # module: another copy (load_package_copy)
        self.config = config
        self.scheduler = self.mod.Scheduler(self.mod.SchedulerConfig(**config))
        self.hybrid = config.get("num_gdn_groups", 0) > 0

    def add(self, spec: RequestSpec, arrival_time: float):
        self.scheduler.add_request(
            self.mod.Request(
                spec.request_id,
                spec.prompt,
                spec.max_tokens,
                arrival_time=arrival_time,
                priority=spec.priority,
                eos_token_id=EOS,
                stop_token_ids=spec.stop_token_ids,
                ignore_eos=spec.ignore_eos,
            )
        )

    def abort(self, request_id: str):
        self.scheduler.abort_request(request_id)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def schedule(self):
        out = self.scheduler.schedule()
        requests = self.scheduler.requests
        record = {
            "scheduled": list(out.num_scheduled_tokens.items()),
            "preempted": sorted(out.preempted_req_ids),
            "finished": sorted(out.finished_req_ids),
            "free_blocks": out.num_free_blocks,
            "blocks": {
                r: [list(t) for t in out.group_block_ids[r]] if self.hybrid else list(out.block_ids[r])
                for r in out.num_scheduled_tokens
            },
            "spec": {r: list(t) for r, t in out.scheduled_spec_decode_tokens.items()},
            "cursor": {r: requests[r].num_computed_tokens for r in out.num_scheduled_tokens},
            "hits": dict(sorted(out.num_cached_tokens.items())),
        }
        sampling = {r: len(out.scheduled_spec_decode_tokens.get(r, ())) for r in out.sampling_req_ids}
        return out, record, sampling

    def num_tokens(self, request_id: str) -> int:
        return self.scheduler.requests[request_id].num_tokens

    def update(self, out, sampled: dict[str, list[int]]):
        results = self.scheduler.update_from_output(out, sampled)
        return [(o.request_id, list(o.new_token_ids), o.finish_reason) for o in results]

    def set_drafts(self, drafts: dict[str, list[int]]):
        self.scheduler.update_draft_token_ids(drafts)


class VllmDriver:
    """vLLM 0.33's synchronous V1 Scheduler, built the way its unit tests build it, on CPU."""

    name = "vllm"
    _model_dir = None

    def __init__(self, config: dict):
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        import torch
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
        from vllm.v1.structured_output import StructuredOutputManager

        self.config = config
        block_size = config["block_size"]
        scheduler_config = SchedulerConfig(
            max_num_seqs=config["max_num_seqs"],
            max_num_batched_tokens=config["max_num_batched_tokens"],
            max_model_len=config["max_model_len"],
            enable_chunked_prefill=config["enable_chunked_prefill"],
            long_prefill_token_threshold=config["long_prefill_token_threshold"],
            scheduler_reserve_full_isl=config["reserve_full_prompt"],
            policy=config["policy"],
            is_encoder_decoder=False,
        )
        model_config = ModelConfig(
            model=self._dummy_model_dir(), skip_tokenizer_init=True, dtype="float16", seed=0,
            max_model_len=config["max_model_len"],
        )
        cache_config = CacheConfig(block_size=block_size, enable_prefix_caching=config["enable_prefix_caching"])
        cache_config.num_gpu_blocks = config["num_blocks"]
        k = config["num_speculative_tokens"]
        speculative_config = SpeculativeConfig(method="ngram", num_speculative_tokens=k) if k else None
        vllm_config = VllmConfig(
            scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config,
            speculative_config=speculative_config,
        )
        attention = KVCacheGroupSpec(
            ["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
        )
        groups = config.get("num_gdn_groups", 0)
        self.hybrid = groups > 0
        scheduler_block_size = hash_block_size = block_size
        retention = None
        if self.hybrid:
            # What vLLM's MambaModelConfig sets up: "align" mode (GDN block = attention block)
            # with prefix caching, else "none" (one GDN page of max_model_len tokens).
            align = config["enable_prefix_caching"]
            mode = "align" if align else "none"
            gdn_block_size = block_size if align else config["max_model_len"]
            cache_config.mamba_cache_mode = mode
            cache_config.mamba_block_size = gdn_block_size
            gdn = [
                KVCacheGroupSpec(
                    [f"gdn{g}"],
                    MambaSpec(block_size=gdn_block_size, shapes=((1,),), dtypes=(torch.float32,),
                              mamba_cache_mode=mode, num_speculative_blocks=k),
                )
                for g in range(groups)
            ]
            # get_kv_cache_groups' order for Qwen3.5: the GDN groups, then attention.
            kv_cache_groups = gdn + [attention]
            # resolve_kv_cache_block_sizes: the LCM of the group block sizes; hashing at the
            # attention block size in align mode.
            scheduler_block_size = math.lcm(block_size, gdn_block_size)
            hash_block_size = block_size if align else scheduler_block_size
            retention = 0  # the engine's CacheConfig default (a bare KVCacheConfig says None)
        else:
            kv_cache_groups = [attention]
        kv_cache_config = KVCacheConfig(
            num_blocks=config["num_blocks"],
            kv_cache_tensors=[],
            kv_cache_groups=kv_cache_groups,
            prefix_cache_retention_interval=retention,
        )
        self.scheduler = Scheduler(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            block_size=scheduler_block_size,
            hash_block_size=hash_block_size,
            structured_output_manager=StructuredOutputManager(vllm_config),
            log_stats=False,
        )
        # vLLM's ngram drafter reserves no lookahead slots (what a hybrid config without use_eagle
        # says); a draft model or an MTP/EAGLE drafter reserves num_speculative_tokens (what an
        # attention-only config keeps, and what an explicit num_lookahead_tokens sets): set directly.
        lookahead = config.get("num_lookahead_tokens")
        if lookahead is None:
            lookahead = 0 if self.hybrid and not config.get("use_eagle") else k
        self.scheduler.num_lookahead_tokens = lookahead
        from vllm.utils.hashing import sha256

        init_none_hash(sha256)
        self.block_hasher = get_request_block_hasher(hash_block_size, sha256)

    @classmethod
    def _dummy_model_dir(cls):
        # A local config.json is all ModelConfig needs: nothing is downloaded.
        if cls._model_dir is None:
            cls._model_dir = tempfile.mkdtemp(prefix="dummy-llama-")
            config = {
                "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
                "num_hidden_layers": 1, "vocab_size": 1000, "max_position_embeddings": 1 << 20,
                "torch_dtype": "float16",
            }
            Path(cls._model_dir, "config.json").write_text(json.dumps(config))
        return cls._model_dir

    def add(self, spec: RequestSpec, arrival_time: float):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=spec.max_tokens, ignore_eos=spec.ignore_eos, stop_token_ids=list(spec.stop_token_ids))
        params.update_from_generation_config({}, eos_token_id=EOS)
        self.scheduler.add_request(
            Request(
                request_id=spec.request_id, prompt_token_ids=list(spec.prompt), sampling_params=params,
                pooling_params=None, arrival_time=arrival_time, priority=spec.priority, block_hasher=self.block_hasher,
            )
        )

    def abort(self, request_id: str):
        from vllm.v1.request import RequestStatus

        self.scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def schedule(self):
        out = self.scheduler.schedule()
        requests = self.scheduler.requests
        manager = self.scheduler.kv_cache_manager
        record = {
            "scheduled": list(out.num_scheduled_tokens.items()),
            "preempted": sorted(out.preempted_req_ids),
            "finished": sorted(out.finished_req_ids),
            "free_blocks": manager.block_pool.get_num_free_blocks(),
            "blocks": {
                r: [list(t) for t in manager.get_block_ids(r)] if self.hybrid else list(manager.get_block_ids(r)[0])
                for r in out.num_scheduled_tokens
            },
            "spec": {r: list(t) for r, t in out.scheduled_spec_decode_tokens.items()},
            "cursor": {r: requests[r].num_computed_tokens for r in out.num_scheduled_tokens},
            # The prefix hit of each admitted (new or resumed) request: its cursor before the step.
            "hits": dict(sorted(
                [(n.req_id, n.num_computed_tokens) for n in out.scheduled_new_reqs]
                + [(r, c) for r, c in zip(out.scheduled_cached_reqs.req_ids, out.scheduled_cached_reqs.num_computed_tokens)
                   if r in out.scheduled_cached_reqs.resumed_req_ids]
            )),
        }
        sampling = {}
        for r in out.num_scheduled_tokens:
            drafts = len(out.scheduled_spec_decode_tokens.get(r, ()))
            if requests[r].num_computed_tokens - drafts >= requests[r].num_tokens:
                sampling[r] = drafts
        return out, record, sampling

    def num_tokens(self, request_id: str) -> int:
        return self.scheduler.requests[request_id].num_tokens

    def update(self, out, sampled: dict[str, list[int]]):
        from vllm.v1.outputs import ModelRunnerOutput

        req_ids = list(out.num_scheduled_tokens)
        runner_output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=[list(sampled.get(r, [])) for r in req_ids],
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        )
        results = []
        for engine_outputs in self.scheduler.update_from_output(out, runner_output).values():
            for o in engine_outputs.outputs:
                reason = o.finish_reason.name.lower() if o.finish_reason is not None else None
                results.append((o.request_id, list(o.new_token_ids), reason))
        return results

    def set_drafts(self, drafts: dict[str, list[int]]):
        from vllm.v1.outputs import DraftTokenIds

        self.scheduler.update_draft_token_ids(DraftTokenIds(list(drafts), [list(d) for d in drafts.values()]))


def run(driver, workload: Workload, max_steps: int = 400) -> list[dict]:
    """Replay a workload on a driver; returns one record per step."""
    pending = sorted(workload.requests, key=lambda s: s.arrival_step)
    k = workload.config["num_speculative_tokens"]
    trace = []
    for step in range(max_steps):
        while pending and pending[0].arrival_step <= step:
            spec = pending.pop(0)
            driver.add(spec, arrival_time=spec.arrival_step + int(spec.request_id[1:]) * 1e-3)
        for request_id in workload.aborts.get(step, ()):
            driver.abort(request_id)
        if not pending and not driver.has_unfinished():
            break
        out, record, sampling = driver.schedule()
        sampled = {}
        for request_id, num_drafts in sampling.items():
            # Position of the first token this step produces.
            position = driver.num_tokens(request_id)
            accepted = num_accepted(request_id, position, num_drafts) if num_drafts else 0
            sampled[request_id] = [model_token(request_id, position + i) for i in range(accepted + 1)]
        record["outputs"] = sorted(driver.update(out, sampled))
        if k:
            drafts = {}
            for request_id in record["cursor"]:
                try:
                    position = driver.num_tokens(request_id)
                except KeyError:  # finished
                    continue
                count = model_token(request_id, position, "ndrafts") % (k + 1)
                drafts[request_id] = [model_token(request_id, position + i) for i in range(count)]
            driver.set_drafts(drafts)
        trace.append(record)
    return trace
