"""An independent computation of the MTP head (transformers' own Qwen3.5 modules) and the target's hidden
states, for the tests that check drafts: the drafter's step by step, and the engine's drafts in a run."""
import os

import torch
from checkpoints import TINY_TEXT
from safetensors.torch import load_file
from step_batches import prompt_batch

from qwen_ops.model.worker.kv_cache import allocate_caches

BLOCK_SIZE, NUM_BLOCKS = 4, 8


class HFReference:
    """The draft step written with transformers' Qwen3.5 RMSNorm, rotary embedding and decoder layer."""

    def __init__(self, path, layer: int):
        from transformers import Qwen3_5TextConfig
        from transformers.models.qwen3_5.modeling_qwen3_5 import (Qwen3_5DecoderLayer, Qwen3_5RMSNorm,
                                                                  Qwen3_5TextRotaryEmbedding)

        tensors = load_file(os.path.join(path, "model.safetensors"))
        self.config = Qwen3_5TextConfig(**TINY_TEXT)
        self.config._attn_implementation = "eager"
        self.layer = Qwen3_5DecoderLayer(self.config, self.config.layer_types.index("full_attention")).eval()
        prefix = f"mtp.layers.{layer}."
        self.layer.load_state_dict({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)})

        def norm(name):
            n = Qwen3_5RMSNorm(self.config.hidden_size, eps=self.config.rms_norm_eps)
            n.weight.data.copy_(tensors[f"mtp.{name}.weight"])
            return n

        self.norm_e, self.norm_h, self.norm = norm("pre_fc_norm_embedding"), norm("pre_fc_norm_hidden"), norm("norm")
        self.fc = tensors["mtp.fc.weight"]
        embed_name = next(k for k in tensors if k.endswith("embed_tokens.weight"))
        self.embed = tensors[embed_name]
        self.lm_head = tensors.get("lm_head.weight", self.embed)
        self.rotary = Qwen3_5TextRotaryEmbedding(self.config)

    def fc_input(self, tokens, hidden):
        e = self.norm_e(torch.nn.functional.embedding(torch.tensor(tokens), self.embed))
        return torch.nn.functional.linear(torch.cat([e, self.norm_h(hidden)], -1), self.fc)

    @torch.no_grad()
    def layer_over(self, fc_rows):
        """The decoder layer over the rows at positions 0..n-1 (causal), then the final norm."""
        n = fc_rows.shape[0]
        positions = torch.arange(n)[None]
        cos_sin = self.rotary(fc_rows[None], positions)
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        out = self.layer(fc_rows[None], position_embeddings=cos_sin, attention_mask=mask, position_ids=positions)
        return self.norm(out[0])


def target_hidden(target, tokens):
    """The target's final-normed hidden states [T, H] of a prompt run as one prefill."""
    caches = allocate_caches(target.config, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, num_state_slots=1,
                             dtype=target.dtype, kv_dtype=target.dtype, device=target.device)
    return target.forward(prompt_batch(tokens, BLOCK_SIZE), caches)


def reference_drafts(ref: HFReference, target, sequence: list[int], k: int) -> list[int]:
    """The k greedy drafts after ``sequence`` (every token known so far): the head over the whole sequence
    shifted by one (token i + 1 beside the target's hidden state at i), then one row per further draft on the
    head's own last hidden state."""
    rows = ref.fc_input(sequence[1:], target_hidden(target, sequence[:-1]))
    drafts = []
    for _ in range(k):
        out = ref.layer_over(rows)
        drafts.append(int(torch.nn.functional.linear(out[-1], ref.lm_head).argmax()))
        rows = torch.cat([rows, ref.fc_input([drafts[-1]], out[-1:])])
    return drafts
