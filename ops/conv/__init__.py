"""Short depthwise causal convolution of the GDN layers, with per-sequence state."""
from .op import causal_conv1d_fn, causal_conv1d_update  # noqa: F401
