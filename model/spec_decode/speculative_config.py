"""``speculative_config`` (vLLM's spelling) checked once, before anything is built.

``LLM(model, speculative_config={"method": "mtp", "num_speculative_tokens": k})``
and ``qwen-generate --speculative-tokens k`` both end up in
``parse_speculative_config``, which returns a ``SpeculativeConfig`` or None
(speculation off) and raises ``ValueError``/``TypeError`` naming the bad
setting. The rules are vLLM 0.33's for ``method="mtp"``: k >= 1 (defaulting to
the number of MTP layers when left out), a k above the number of MTP layers
must be a multiple of it (the layers are cycled, ``step % num_layers``), and
the checkpoint must carry an MTP head; plus this scheduler's own bound,
k < ``max_num_batched_tokens`` (a decode row of 1 + k tokens must fit a step).
"""
from __future__ import annotations

from dataclasses import dataclass

METHODS = ("mtp",)
KEYS = ("method", "num_speculative_tokens")


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding with Qwen3.5's MTP head drafting ``num_speculative_tokens`` (k) tokens a step.

    Each decode row of a step then carries 1 + k query tokens, and each
    request holds 1 + k GDN state rows (``state_rows_per_request``).
    """

    method: str
    num_speculative_tokens: int

    @property
    def state_rows_per_request(self) -> int:
        return 1 + self.num_speculative_tokens


def parse_speculative_config(value, *, num_mtp_layers: int, max_num_batched_tokens: int,
                             model_name: str = "the checkpoint") -> SpeculativeConfig | None:
    """Check ``value`` (None, a dict in vLLM's spelling, or a ``SpeculativeConfig``).

    Args:
        value: None (no speculation) or ``{"method": "mtp", "num_speculative_tokens": k}``.
        num_mtp_layers: MTP layers the checkpoint carries (0 when it has none;
            see ``mtp.load_mtp_weights`` for the detailed weight check).
        max_num_batched_tokens: the scheduler's token budget per step.
        model_name: how messages name the checkpoint.
    Returns:
        The ``SpeculativeConfig``, or None when ``value`` is None.
    """
    if value is None:
        return None
    if isinstance(value, SpeculativeConfig):
        value = {"method": value.method, "num_speculative_tokens": value.num_speculative_tokens}
    if not isinstance(value, dict):
        raise TypeError(f"speculative_config must be a dict such as {{'method': 'mtp', 'num_speculative_tokens': 2}} "
                        f"or None, got {type(value).__name__}")
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise ValueError(f"speculative_config has unsupported key(s) {unknown}; supported: {list(KEYS)}")
    method = value.get("method")
    if method not in METHODS:
        raise ValueError(f"speculative_config['method'] must be one of {list(METHODS)} (Qwen3.5's own "
                         f"multi-token-prediction head is the only drafter), got {method!r}")
    if isinstance(num_mtp_layers, bool) or not isinstance(num_mtp_layers, int) or num_mtp_layers < 0:
        raise TypeError(f"parse_speculative_config: num_mtp_layers must be an int >= 0, got {num_mtp_layers!r}")
    if num_mtp_layers == 0:
        raise ValueError(f"speculative_config method 'mtp' needs MTP weights (mtp.fc, mtp.pre_fc_norm_embedding, "
                         f"mtp.pre_fc_norm_hidden, mtp.norm, mtp.layers.*), and {model_name} has none")
    k = value.get("num_speculative_tokens", num_mtp_layers)
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"speculative_config['num_speculative_tokens'] must be an int >= 1, got {k!r}")
    if k <= 0:
        raise ValueError(f"speculative_config['num_speculative_tokens'] must be >= 1, got {k}")
    if k >= max_num_batched_tokens:
        raise ValueError(f"speculative_config['num_speculative_tokens'] ({k}) must be < max_num_batched_tokens "
                         f"({max_num_batched_tokens}): a decode row of 1 + k tokens must fit one step")
    if k > num_mtp_layers and k % num_mtp_layers:
        raise ValueError(f"speculative_config['num_speculative_tokens'] ({k}) must be a multiple of the "
                         f"{num_mtp_layers} MTP layers of {model_name} when larger than that (they are cycled)")
    return SpeculativeConfig(method=method, num_speculative_tokens=k)


def speculative_config_from_cli(num_speculative_tokens: int | None) -> dict | None:
    """``qwen-generate --speculative-tokens k``: the dict ``LLM`` takes (None or 0: off)."""
    if not num_speculative_tokens:
        return None
    return {"method": "mtp", "num_speculative_tokens": num_speculative_tokens}
