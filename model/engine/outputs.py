"""What the engine hands back: per-request outputs (vLLM's names), stream deltas and step statistics."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CompletionOutput:
    """One generated sequence: its tokens, text, why it ended, and logprobs when asked."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None  # "stop", "length", "abort" or "error" (its steps failed, see step_failure.py)
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
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache at admission (vLLM's name)


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
