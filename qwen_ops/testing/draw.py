"""A seeded random source on one device, the first argument of every builder in ``qwen_ops.testing``."""
from __future__ import annotations

import torch


class Draw:
    """Random tensors from one ``torch.Generator``, created on the generator's device.

    ``Draw(gen)`` wraps an existing generator (a test's seeded fixture);
    ``Draw(seed=0, device="cuda")`` makes one. Large inputs are drawn where
    they live, so a benchmark on a GPU does not copy them from the host.
    """

    def __init__(self, gen: torch.Generator | None = None, *, seed: int = 0, device=None):
        if gen is None:
            gen = torch.Generator(device=torch.device(device or "cpu")).manual_seed(seed)
        self.gen = gen
        self.device = gen.device

    def randn(self, *shape, dtype=None, scale=1.0) -> torch.Tensor:
        """Normal values of ``shape`` (times ``scale``), drawn in float32 then cast to ``dtype``."""
        x = torch.randn(*shape, generator=self.gen, device=self.device)
        if scale != 1.0:
            x = x * scale
        return x if dtype is None else x.to(dtype)

    def uniform(self, *shape, low=0.0, high=1.0, dtype=None) -> torch.Tensor:
        """Uniform values in [low, high), float32 unless ``dtype`` says otherwise."""
        x = torch.rand(*shape, generator=self.gen, device=self.device)
        if (low, high) != (0.0, 1.0):
            x = x * (high - low) + low
        return x if dtype is None else x.to(dtype)

    def randint(self, low, high, *shape, dtype=torch.int64) -> torch.Tensor:
        """Integers in [low, high); ``shape`` as separate sizes or one tuple."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        return torch.randint(low, high, shape, generator=self.gen, device=self.device, dtype=dtype)

    def randperm(self, n, dtype=torch.int64) -> torch.Tensor:
        return torch.randperm(n, generator=self.gen, device=self.device).to(dtype)

    def tensor(self, values, dtype) -> torch.Tensor:
        """Fixed values (metadata such as lengths or indices) on this device."""
        return torch.tensor(values, dtype=dtype, device=self.device)
