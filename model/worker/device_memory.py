"""Which device the engine runs on and how much memory it may give the KV cache and GDN state pools."""
from __future__ import annotations

import os

import torch

# KV memory used on a CPU when no budget is given: this share of the memory available when the engine's
# config is resolved (before the weights load), since the host's RAM is shared with everything else there.
CPU_KV_MEMORY_FRACTION = 0.1
ACCELERATOR_MEMORY_UTILIZATION = 0.9


def default_device() -> torch.device:
    if hasattr(torch, "npu") and torch.npu.is_available():  # torch_npu registers torch.npu
        return torch.device("npu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def device_memory(device: torch.device) -> tuple[float, str]:
    """(memory in GiB, device name) as the batch-limit defaults read them."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return props.total_memory / 2**30, props.name
    if device.type == "npu":
        props = torch.npu.get_device_properties(device)
        return props.total_memory / 2**30, props.name
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, "cpu"


def cpu_available_gib() -> float:
    """Memory the kernel says can be allocated without swapping (MemAvailable), in GiB."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / 2**30
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") / 2**30


def default_kv_cache_gib(device: torch.device, memory_gib: float, weight_gib: float) -> float:
    """The KV cache and state budget when none is given: on a CPU ``CPU_KV_MEMORY_FRACTION`` of the memory
    available now; on an accelerator ``ACCELERATOR_MEMORY_UTILIZATION`` of its memory minus the weights."""
    if device.type == "cpu":
        return CPU_KV_MEMORY_FRACTION * cpu_available_gib()
    return max(ACCELERATOR_MEMORY_UTILIZATION * memory_gib - weight_gib, 0.0)
