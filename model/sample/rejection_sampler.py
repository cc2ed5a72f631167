"""Rejection sampling of speculative drafts against the target model (vLLM 0.33's ``RejectionSampler``).

One verify forward gives, for each request r with k_r drafts d_0..d_{k_r-1},
k_r + 1 rows of target logits: row i is the target's distribution for the
position of draft i (computed from the inputs up to d_{i-1}), and the last
row (the "bonus" row) is its distribution after all k_r drafts. The sampler
emits, per request, the accepted drafts followed by exactly one token of the
target's own, so a step advances a request by 1 to k_r + 1 tokens:

* greedy requests (temperature 0): accept d_i while it equals the argmax of
  row i; at the first mismatch emit that argmax and stop; when all k_r drafts
  are accepted emit the argmax of the bonus row. The tokens are exactly what
  greedy decoding without drafts emits.
* random requests: p_i is row i after temperature, top-k and top-p (as the
  plain sampler applies them, ``sampling.filtered_probs``); q_i is the
  drafter's distribution (``draft_probs``), or one-hot at d_i for a drafter
  that picks its tokens deterministically (MTP's greedy drafts; vLLM passes
  no draft probabilities then). Accept d_i with probability
  ``min(1, p_i(d_i) / q_i(d_i))`` (never where q_i(d_i) = 0); at the first
  rejection emit a token drawn from ``max(p_i - q_i, 0)`` normalised and
  stop; when all are accepted emit a token drawn from the bonus row's p.
  Each emitted token then has exactly the target's distribution.

A draft of -1 is a placeholder (the scheduler pads a request to the decode
shape with them, as vLLM does): always rejected, so the walk stops there and
emits the target's own token (argmax, or a draw from p).

Randomness: each random request uses only its own generator and draws the
same amount whatever happens (k_r uniforms, V exponentials for the recovered
token, V for the bonus token), so its tokens do not depend on the batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import SamplingParams, filtered_probs


@dataclass(frozen=True)
class RejectionResult:
    """Per request, in input order: ``token_ids[r]`` = accepted drafts + one target token.

    ``num_accepted[r] == len(token_ids[r]) - 1`` drafts were accepted.
    """

    token_ids: list[list[int]]
    num_accepted: list[int]


def _check(target_logits, draft_token_ids, params, generators, draft_probs) -> list[int]:
    """Validate the arguments; return the row offset of each request (len R + 1)."""
    where = "rejection_sample"
    if not isinstance(target_logits, torch.Tensor) or target_logits.dim() != 2 \
            or target_logits.dtype != torch.float32:
        raise TypeError(f"{where}: 'target_logits' must be a float32 tensor [sum(k_r + 1), V], got "
                        f"{getattr(target_logits, 'dtype', type(target_logits).__name__)} "
                        f"{tuple(getattr(target_logits, 'shape', ()))}")
    n = len(draft_token_ids)
    if len(params) != n or len(generators) != n:
        raise ValueError(f"{where}: 'draft_token_ids', 'params' and 'generators' must have one entry per request, "
                         f"got {n}, {len(params)}, {len(generators)}")
    vocab = target_logits.shape[1]
    offsets = [0]
    for r, drafts in enumerate(draft_token_ids):
        if not isinstance(params[r], SamplingParams):
            raise TypeError(f"{where}: params[{r}] must be a SamplingParams, got {type(params[r]).__name__}")
        if any(isinstance(t, bool) or not isinstance(t, int) or not -1 <= t < vocab for t in drafts):
            raise ValueError(f"{where}: draft_token_ids[{r}] must hold token ids in [0, {vocab}) or -1 "
                             f"(a placeholder), got {list(drafts)}")
        if not params[r].greedy and generators[r] is None:
            raise ValueError(f"{where}: request {r} samples (temperature > 0) and needs a torch.Generator")
        offsets.append(offsets[-1] + len(drafts) + 1)
    if target_logits.shape[0] != offsets[-1]:
        raise ValueError(f"{where}: 'target_logits' must have sum(k_r + 1) = {offsets[-1]} rows (k_r drafts and "
                         f"one bonus row per request), got {target_logits.shape[0]}")
    num_drafts = offsets[-1] - n
    if draft_probs is not None:
        if not isinstance(draft_probs, torch.Tensor) or draft_probs.dtype != torch.float32 \
                or tuple(draft_probs.shape) != (num_drafts, vocab):
            raise ValueError(f"{where}: 'draft_probs' must be float32 [sum(k_r), V] = [{num_drafts}, {vocab}], got "
                             f"{getattr(draft_probs, 'dtype', None)} {tuple(getattr(draft_probs, 'shape', ()))}")
        if draft_probs.device != target_logits.device:
            raise ValueError(f"{where}: 'draft_probs' is on {draft_probs.device} but 'target_logits' on "
                             f"{target_logits.device}")
    return offsets


def rejection_sample(target_logits: torch.Tensor, draft_token_ids: list[list[int]], params: list[SamplingParams],
                     generators: list[torch.Generator | None],
                     draft_probs: torch.Tensor | None = None) -> RejectionResult:
    """Accept or reject each request's drafts against the target (module docstring).

    Args:
        target_logits: float32 [sum_r (k_r + 1), V]: per request, in order, the
            rows of its k_r drafts then its bonus row (raw logits: no
            temperature applied).
        draft_token_ids: R lists; request r's k_r >= 0 drafts.
        params: R ``SamplingParams`` (temperature 0: greedy).
        generators: R generators (None allowed for greedy requests).
        draft_probs: float32 [sum_r k_r, V], the drafter's distribution of
            each draft, in draft order; None: deterministic drafts (q one-hot).
    Returns:
        ``RejectionResult``: per request the emitted tokens (accepted drafts,
        then the target's token) and the number of drafts accepted.
    """
    offsets = _check(target_logits, draft_token_ids, params, generators, draft_probs)
    n = len(draft_token_ids)
    device = target_logits.device
    draft_rows = [offsets[r] + i for r in range(n) for i in range(len(draft_token_ids[r]))]
    flat_drafts = torch.tensor([t for drafts in draft_token_ids for t in drafts], dtype=torch.int64, device=device)
    placeholder = flat_drafts < 0
    flat_drafts = flat_drafts.clamp_min(0)  # gather-safe; placeholders are rejected below
    # Draft i of request r is row offsets[r] + i; its probability under q sits at row (that row - r).
    greedy_choice = target_logits.argmax(dim=-1)
    choice = greedy_choice.clone()  # the token emitted if the walk stops at this row
    accepted = torch.zeros(len(draft_rows), dtype=torch.bool, device=device)
    if draft_rows:
        accepted = greedy_choice[torch.tensor(draft_rows, device=device)] == flat_drafts

    random_reqs = [r for r in range(n) if not params[r].greedy]
    if random_reqs:
        rows = [offsets[r] + i for r in random_reqs for i in range(len(draft_token_ids[r]) + 1)]
        row_params = [params[r] for r in random_reqs for _ in range(len(draft_token_ids[r]) + 1)]
        row_idx = torch.tensor(rows, device=device)
        p = filtered_probs(target_logits[row_idx], row_params)
        # Per request, in a fixed order: k_r uniforms, V exponentials (recovered), V exponentials (bonus).
        uniforms, recovered_race, bonus_race = [], [], []
        for r in random_reqs:
            g = generators[r]
            uniforms.append(torch.rand(len(draft_token_ids[r]), device=device, generator=g))
            recovered_race.append(torch.empty(target_logits.shape[1], device=device).exponential_(generator=g))
            bonus_race.append(torch.empty(target_logits.shape[1], device=device).exponential_(generator=g))
        local = 0  # position of each request's first row inside p
        for j, r in enumerate(random_reqs):
            k = len(draft_token_ids[r])
            p_req = p[local:local + k + 1]
            choice[offsets[r] + k] = (p_req[k] / bonus_race[j]).argmax()
            if k:
                d = flat_drafts[offsets[r] - r: offsets[r] - r + k]
                if draft_probs is None:
                    q = torch.nn.functional.one_hot(d, p.shape[1]).to(torch.float32)
                else:
                    q = draft_probs[offsets[r] - r: offsets[r] - r + k].clone()
                q[placeholder[offsets[r] - r: offsets[r] - r + k]] = 0  # nothing drafted: the residual is p
                p_d = p_req[:k].gather(1, d[:, None])[:, 0]
                q_d = q.gather(1, d[:, None])[:, 0]
                # u < p/q accepts with probability min(1, p/q) for u uniform in [0, 1).
                accepted[offsets[r] - r: offsets[r] - r + k] = (q_d > 0) & (uniforms[j] * q_d < p_d)
                residual = (p_req[:k] - q).clamp_min(0)
                # One race per request serves all its positions: only the first rejection is used.
                choice[offsets[r]: offsets[r] + k] = (residual / recovered_race[j]).argmax(dim=-1)
            local += k + 1

    accepted_list, choice_list = (accepted & ~placeholder).tolist(), choice.tolist()
    token_ids, num_accepted = [], []
    for r, drafts in enumerate(draft_token_ids):
        first = offsets[r] - r
        a = 0
        while a < len(drafts) and accepted_list[first + a]:
            a += 1
        token_ids.append(list(drafts[:a]) + [choice_list[offsets[r] + a]])
        num_accepted.append(a)
    return RejectionResult(token_ids, num_accepted)

