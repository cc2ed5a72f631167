"""The float32 run of the tiny default model that reduced-precision runs (INT8 weights, bfloat16) are held to.

``float32_run``: 16 greedy tokens after a 32-token prompt and the teacher-forced logprobs of that whole
sequence. ``assert_parity``: another engine's greedy tokens must be the same and its logprobs of the
sequence's tokens within a bound (teacher-forced, so one early difference cannot cascade).
"""
from __future__ import annotations

import pytest
import torch

from qwen_ops import LLM, SamplingParams
from qwen_ops.model.loading.default_model import default_model_dir

PROMPT = list(range(1000, 1032))
NEW_TOKENS = 16
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, temperature=0)


@pytest.fixture(scope="module")
def default_dir():
    return default_model_dir()


@pytest.fixture(scope="module")
def float32_run(default_dir):
    llm = LLM(default_dir, num_blocks=64)
    tokens = llm.generate([PROMPT], GREEDY)[0].outputs[0].token_ids
    sequence = PROMPT + list(tokens)
    return tokens, sequence, torch.log_softmax(llm.llm_engine.score(sequence), dim=-1), llm.llm_engine.engine_config


def assert_parity(llm, float32_run, bound: float, what: str) -> float:
    """Greedy tokens equal to float32's and teacher-forced logprobs within ``bound``; returns the max difference."""
    tokens, sequence, ref_logprobs, _ = float32_run
    out = llm.generate([PROMPT], GREEDY)[0].outputs[0].token_ids
    assert list(out) == list(tokens), f"{what}: greedy tokens differ from float32's"
    logprobs = torch.log_softmax(llm.llm_engine.score(sequence).float(), dim=-1)
    chosen = torch.tensor(sequence[1:])[:, None]
    diff = (logprobs[:-1].gather(1, chosen) - ref_logprobs[:-1].gather(1, chosen)).abs().max().item()
    assert 0 < diff <= bound, (what, diff)  # > 0: the reduced precision really ran
    return diff
