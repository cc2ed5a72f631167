"""Speculative-decoding statistics (vLLM's ``SpecDecodingStats`` and the numbers its logger prints).

One ``observe`` per verified draft: a request that entered a step with d
drafts of which a were accepted. From the sums: the acceptance rate
(accepted / drafted tokens), the mean acceptance length (1 + accepted /
drafts: tokens a request advances per verify step) and the acceptance rate
of each draft position (how often position i was accepted, per draft).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecDecodingStats:
    """Counts over the drafts seen so far, for k = ``num_speculative_tokens`` positions."""

    num_speculative_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_draft_tokens_per_pos: list[int] = field(default_factory=list)

    def __post_init__(self):
        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"SpecDecodingStats.num_speculative_tokens must be an int >= 1, got {k!r}")
        self.num_accepted_tokens_per_pos = self.num_accepted_tokens_per_pos or [0] * k
        self.num_draft_tokens_per_pos = self.num_draft_tokens_per_pos or [0] * k

    def observe(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """One request's draft of ``num_draft_tokens`` (<= k) tokens, ``num_accepted_tokens`` of them accepted.

        A step without drafts (``num_draft_tokens == 0``) is not a draft and counts nothing (as in vLLM).
        """
        if not 0 <= num_accepted_tokens <= num_draft_tokens <= self.num_speculative_tokens:
            raise ValueError(f"SpecDecodingStats.observe: need 0 <= accepted ({num_accepted_tokens}) <= drafted "
                             f"({num_draft_tokens}) <= k ({self.num_speculative_tokens})")
        if num_draft_tokens == 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        for i in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[i] += 1
        for i in range(num_draft_tokens):
            self.num_draft_tokens_per_pos[i] += 1

    def merge(self, other: "SpecDecodingStats") -> None:
        """Add ``other``'s counts (e.g. one request's into the run's)."""
        if other.num_speculative_tokens != self.num_speculative_tokens:
            raise ValueError("SpecDecodingStats.merge: both must count the same k")
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        for i in range(self.num_speculative_tokens):
            self.num_accepted_tokens_per_pos[i] += other.num_accepted_tokens_per_pos[i]
            self.num_draft_tokens_per_pos[i] += other.num_draft_tokens_per_pos[i]

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens; None before any draft."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted tokens per draft: tokens advanced per verify step; None before any draft."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None

    @property
    def acceptance_rate_per_pos(self) -> list[float] | None:
        """Per draft position i: drafts whose position i was accepted / drafts (vLLM's per-position rate)."""
        if not self.num_drafts:
            return None
        return [a / self.num_drafts for a in self.num_accepted_tokens_per_pos]

    def as_metrics(self) -> dict[str, float]:
        """Flat numeric entries for ``RequestOutput.metrics``: the counts always; the rates (acceptance,
        mean acceptance length, ``spec_acceptance_rate_pos_{i}`` per draft position) once a draft was seen."""
        metrics: dict[str, float] = {
            "spec_num_drafts": self.num_drafts,
            "spec_num_draft_tokens": self.num_draft_tokens,
            "spec_num_accepted_tokens": self.num_accepted_tokens,
        }
        if self.num_drafts:
            metrics["spec_acceptance_rate"] = self.acceptance_rate
            metrics["spec_mean_acceptance_length"] = self.mean_acceptance_length
            for i, rate in enumerate(self.acceptance_rate_per_pos):
                metrics[f"spec_acceptance_rate_pos_{i}"] = rate
        return metrics

    def summary(self) -> str:
        """One line for ``qwen-generate``."""
        if not self.num_drafts:
            return "speculative decoding: no drafts verified"
        rates = ", ".join(f"{r:.3f}" for r in self.acceptance_rate_per_pos)
        return (f"speculative decoding: mean acceptance length {self.mean_acceptance_length:.2f}, "
                f"accepted {self.num_accepted_tokens}/{self.num_draft_tokens} draft tokens "
                f"({100 * self.acceptance_rate:.1f} %), per-position acceptance rate {rates}")
