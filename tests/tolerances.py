"""Every numeric tolerance used by the tests, in one place.

``REFERENCE_VS_FLOAT64``: a torch reference, run in the given dtype, against
an independent float64 loop. ``KERNEL_VS_REFERENCE``: a kernel backend
(Triton, Ascend C) against the torch reference in the same dtype. Values are
(atol, rtol) for ``torch.testing.assert_close`` and are as tight as the
dtype's rounding allows for the reductions involved.
"""
import torch

REFERENCE_VS_FLOAT64 = {
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}

KERNEL_VS_REFERENCE = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}


def tol(table, dtype):
    atol, rtol = table[dtype]
    return {"atol": atol, "rtol": rtol}
