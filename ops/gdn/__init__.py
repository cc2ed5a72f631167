"""Gated DeltaNet (GDN): the chunked delta rule, its recurrent decode update and gating."""
from .op import chunk_gated_delta_rule, fused_gdn_gating, fused_recurrent_gated_delta_rule  # noqa: F401
from .chunk_table import prepare_chunk_indices  # noqa: F401
from .decode_step.op import gdn_decode_step  # noqa: F401
