"""Sampling settings (vLLM's ``SamplingParams``) and the sampler that applies them to logits."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch

from .greedy_argmax import greedy_argmax


@dataclass
class SamplingParams:
    """How one request samples (vLLM's names).

    max_tokens: tokens to generate at most (>= 1).
    temperature: 0 is greedy (argmax); > 0 divides the logits before sampling.
    top_p: keep the smallest set of tokens whose probability reaches top_p, in (0, 1].
    top_k: keep the k most likely tokens; 0 or -1 keeps all.
    seed: a per-request random seed (its samples then do not depend on the batch).
    stop_token_ids: tokens that end the request (kept in the output).
    ignore_eos: keep generating after the model's end-of-sequence token.
    logprobs: for each generated token, return the log-probabilities of the
        ``logprobs`` most likely tokens plus the chosen one (None: none).
    detokenize: also return the text.
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None
    detokenize: bool = True

    def __post_init__(self):
        def bad(name, want):
            raise ValueError(f"SamplingParams.{name} must be {want}, got {getattr(self, name)!r}")

        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            bad("max_tokens", "an int >= 1")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) \
                or not self.temperature >= 0 or self.temperature == float("inf"):
            bad("temperature", "a finite number >= 0 (0 is greedy)")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            bad("top_p", "in (0, 1]")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < -1:
            bad("top_k", "an int >= 1, or 0 / -1 to disable it")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            bad("seed", "an int or None")
        if self.logprobs is not None and (isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int)
                                          or self.logprobs < 0):
            bad("logprobs", "an int >= 0 or None")
        # A str or bytes is iterable too: "12" must not become [1, 2].
        if isinstance(self.stop_token_ids, (str, bytes, bytearray)):
            bad("stop_token_ids", "a list of int token ids, not a string")
        try:
            ids = list(self.stop_token_ids)
            # operator.index takes ints (numpy and 0-d torch integers too), never floats or strings.
            if any(isinstance(t, bool) for t in ids):
                raise TypeError
            ids = [operator.index(t) for t in ids]
        except TypeError:
            bad("stop_token_ids", "a list of int token ids")
        if any(t < 0 for t in ids):
            bad("stop_token_ids", "a list of token ids >= 0")
        self.stop_token_ids = ids  # a copy: the caller's list is not kept

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _filter_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) what top-k and top-p drop, row by row. logits [S, V]; top_k [S] (V = off); top_p [S]."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    vocab = logits.shape[-1]
    rank = torch.arange(vocab, device=logits.device)[None, :]
    drop = rank >= top_k[:, None]
    probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(-1)
    # Drop a token when the tokens ranked before it already reach top_p (the first one always stays).
    before = probs.cumsum(-1) - probs
    drop |= before >= top_p[:, None]
    drop[:, 0] = False
    return logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))


def filtered_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """The distribution a random (temperature > 0) row draws from: float32 [S, V].

    ``softmax(logits / temperature)`` after top-k then top-p, row by row;
    logits [S, V] float32, one non-greedy ``SamplingParams`` per row.
    """
    vocab = logits.shape[-1]
    temp = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=logits.device)
    top_k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params], device=logits.device)
    top_p = torch.tensor([float(p.top_p) for p in params], dtype=torch.float32, device=logits.device)
    scaled = logits / temp[:, None]
    if any(p.top_k > 0 or p.top_p < 1 for p in params):
        scaled = _filter_top_k_top_p(scaled, top_k, top_p)
    return scaled.softmax(-1)


def draw(weights: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row of ``weights`` [S, V] (probabilities, need not sum to 1), row i with generators[i].

    Exponential race: argmax(w / E) with E ~ Exp(1) draws token i with
    probability w_i / sum(w). Each row consumes exactly V exponentials of its
    generator. Returns int64 [S].
    """
    vocab = weights.shape[-1]
    race = torch.stack([torch.empty(vocab, device=weights.device).exponential_(generator=g) for g in generators])
    return (weights / race).argmax(dim=-1)


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
           ) -> tuple[list[int], list[dict[int, float] | None]]:
    """Pick one token per row of ``logits`` [S, V] float32.

    Greedy rows take the argmax. Other rows divide by the temperature, apply
    top-k then top-p, and draw with their own generator (so a request's draws do
    not depend on which other requests share the batch). Logprobs are those of
    the model's raw distribution (``log_softmax(logits)``), as vLLM returns them.
    Returns the tokens and, per row, ``{token: logprob}`` (None where not asked).
    """
    s, vocab = logits.shape
    tokens = greedy_argmax(logits)  # = logits.argmax(dim=-1), several times faster over a large vocabulary
    random_rows = [i for i, p in enumerate(params) if not p.greedy]
    if random_rows:
        idx = torch.tensor(random_rows, device=logits.device)
        probs = filtered_probs(logits[idx], [params[i] for i in random_rows])
        tokens[idx] = draw(probs, [generators[i] for i in random_rows])
    token_list = tokens.tolist()

    logprobs: list[dict[int, float] | None] = [None] * s
    wanted = [i for i, p in enumerate(params) if p.logprobs is not None]
    if wanted:
        lp = logits[wanted].log_softmax(-1)
        for row, i in enumerate(wanted):
            logprobs[i] = logprob_entry(lp[row], token_list[i], params[i].logprobs)
    return token_list, logprobs


def logprob_entry(logprobs: torch.Tensor, token: int, num: int) -> dict[int, float]:
    """``{token: logprob}`` of the ``num`` most likely tokens of one row plus the chosen ``token``.

    logprobs: [V] float32, ``log_softmax`` of the row's raw logits (vLLM's default, ``raw_logprobs``).
    """
    k = min(num, logprobs.shape[-1])
    top_vals, top_ids = logprobs.topk(k) if k else (logprobs[:0], logprobs[:0].long())
    entry = dict(zip(top_ids.tolist(), top_vals.tolist()))
    entry[token] = float(logprobs[token])
    return entry
