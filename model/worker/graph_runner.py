"""Graph mode (``LLM(enforce_eager=False)``): the model's forward as compiled whole graphs over static buffers.

Each step is padded (``step_padding.py``) to one of a few capture sizes, so the graphs are bounded by the
shapes those sizes allow, not one per batch; decode rows and prefill chunks go through the same graphs
(the step's mixed layout is padded part by part). The forward is ``torch.compile(fullgraph=True,
dynamic=False)``: a graph break anywhere in it is an error, not a silent split. Its inputs are persistent
per shape (vLLM's static ``input_ids``/``positions``/metadata buffers): a step copies its padded metadata
into them, which is what a captured graph (CUDA, NPU) needs, as it replays on fixed addresses.

The compiled function lives at module level, one per (backend, mode): dynamo's cache is per code object
and guards on shapes and types, not on which model object is passed, so a second engine of the same
config in the process reuses the graphs (``compiled_shapes`` counts them process-wide).

Devices: on CUDA the inductor backend runs with ``mode="reduce-overhead"`` (CUDA graphs over the static
buffers; written, not run here: no GPU). On an Ascend NPU the "torchair" backend is TorchAir's
``get_npu_backend`` with its config's ``mode = "reduce-overhead"`` (NPU graphs, aclgraph; written, not run:
no NPU, no CANN). On the CPU it is plain inductor (or the configured backend).
"""
from __future__ import annotations

import dataclasses
import logging
import time

import torch

from ...ops._backend import read_installation
from ..network.step_inputs import StepInputs
from .step_padding import capture_sizes, pad_step

logger = logging.getLogger("qwen_ops.engine")

# The backend each device's graphs use by default, and the torch.compile mode that captures them.
DEFAULT_BACKEND = {"cpu": "inductor", "cuda": "inductor", "npu": "torchair"}


def compile_mode(backend: str, device: torch.device) -> str | None:
    """``reduce-overhead`` (inductor's CUDA graphs) on CUDA; None elsewhere (NPU graphs are the backend's)."""
    return "reduce-overhead" if device.type == "cuda" and backend == "inductor" else None


def available_backends() -> list[str]:
    """The torch.compile backends this process can use (debug ones such as aot_eager included)."""
    return sorted(set(torch._dynamo.list_backends(exclude_tags=())) | {"inductor", "torchair"})


def _torch_backend(backend: str):
    """What torch.compile's ``backend=`` gets: the name, or for "torchair" TorchAir's NPU-graph backend
    (not run here: torch_npu and torchair need CANN)."""
    if backend != "torchair":
        return backend
    try:
        import torch_npu  # noqa: F401
        import torchair
    except ImportError as error:
        raise GraphModeError(f"compile_backend='torchair' needs torch_npu and torchair ({error}); pass "
                             f"enforce_eager=True or another compile_backend") from error
    config = torchair.CompilerConfig()
    config.mode = "reduce-overhead"  # captured NPU graphs (aclgraph) over the static buffers
    return torchair.get_npu_backend(compiler_config=config)


def _target_graph(model, batch: StepInputs, caches) -> torch.Tensor:
    """The target model's forward (``Qwen35ForCausalLM.forward_layers``)."""
    return model.forward_layers(batch, caches)


def _mtp_graph(mtp, batch: StepInputs, caches, hidden: torch.Tensor, step: int) -> torch.Tensor:
    """One draft step of the MTP head (``Qwen35MTP.forward_layers``); ``step`` is specialised (its layer)."""
    return mtp.forward_layers(batch, hidden, caches, step)


GRAPHS = {"target": _target_graph, "mtp": _mtp_graph}
_compiled: dict[tuple[str, str, str | None], object] = {}
# Every (forward, backend, mode, shape key) compiled in this process, with its compile time (first call) in s.
compiled_shapes: dict[tuple, float] = {}


def compiled_forward(forward: str, backend: str, mode: str | None):
    """The process-wide compiled ``forward`` ("target" or "mtp") of (backend, mode)."""
    fn = _compiled.get((forward, backend, mode))
    if fn is None:
        fn = torch.compile(GRAPHS[forward], fullgraph=True, dynamic=False, backend=_torch_backend(backend),
                           mode=mode)
        _compiled[(forward, backend, mode)] = fn
    return fn


class GraphModeError(RuntimeError):
    """The forward could not be compiled as one graph (``enforce_eager=True`` runs it eager)."""


class GraphRunner:
    """Runs padded steps through the compiled forward; says None when a step must run eager.

    max_capture_size: the largest padded size of any part of a step (decode rows, prefill sequences,
    prefill tokens): a larger step runs eager, said once. max_graphs: at most this many shapes are
    compiled per runner; steps of further shapes run eager, said once.
    """

    def __init__(self, model, device: torch.device, *, backend: str, max_capture_size: int, block_table_width: int,
                 max_graphs: int = 64, forward: str = "target"):
        read_installation()  # backend resolution runs inside the graphs: what it reads must be read before
        self.model = model
        self.forward = forward
        self.device = device
        self.backend = backend
        self.mode = compile_mode(backend, device)
        self.sizes = capture_sizes(max_capture_size)
        self.block_table_width = block_table_width
        self.max_graphs = max_graphs
        self.shapes: set[tuple] = set()  # shape keys this runner has run
        self.static: dict[tuple, StepInputs] = {}  # persistent input buffers per shape key
        self.first_compile_s: float | None = None
        self.graph_steps = self.eager_steps = 0
        self._warned: set[str] = set()
        limit = max_graphs + 8
        for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, name) and getattr(torch._dynamo.config, name) < limit:
                setattr(torch._dynamo.config, name, limit)
        self.fn = compiled_forward(forward, backend, self.mode)
        if self.mode == "reduce-overhead":
            # CUDA graphs replay on fixed addresses: inductor copies every input that is not static into its
            # own buffer before each replay (the weights each step) and declines to capture a graph that
            # mutates a non-static input (the KV caches, the GDN pools). Written, not run here: no GPU.
            mark_static_tensors(model)

    def set_caches(self, caches) -> None:
        """The caches the forward reads and writes (fixed for the runner's life: the graphs capture them)."""
        self.model_caches = caches
        if self.mode == "reduce-overhead":
            mark_static_tensors(caches)

    def describe(self) -> str:
        """The budget line's part: graph mode, backend, capture sizes."""
        mode = f" mode={self.mode}" if self.mode else ""
        return (f"graphs=compiled(backend={self.backend}{mode} capture_sizes={self.sizes[0]}..{self.sizes[-1]} "
                f"({len(self.sizes)} sizes))")

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(message)

    def run(self, meta, gdn_rows, build, row_inputs: tuple[torch.Tensor, ...] = (), step: int | None = None
            ) -> torch.Tensor | None:
        """The real rows' output [T, H] of the step ``meta`` (validated, CPU), or None: run it eager.

        build(padded_meta, padded_gdn_rows) -> the padded StepInputs on the device. row_inputs: per-token
        tensors [T, ...] of the real step (the MTP's hidden states), scattered into the padded rows (zeros on
        padding rows). step: the MTP's draft step."""
        padded = pad_step(meta, gdn_rows, self.sizes, self.block_table_width)
        if padded is None:
            self.eager_steps += 1
            self._warn_once("size", f"graph mode ({self.forward}): a step of {meta.num_decodes} decodes and "
                            f"{meta.num_prefills} prefill chunks ({meta.num_actual_tokens} tokens) exceeds the "
                            f"largest capture size {self.sizes[-1]}: such steps run eager")
            return None
        inputs = build(padded.meta, padded.gdn_rows)
        real_rows = padded.real_rows.to(self.device)
        rows = []
        for t in row_inputs:
            full = t.new_zeros((padded.meta.num_actual_tokens,) + tuple(t.shape[1:]))
            rows.append(full.index_copy_(0, real_rows, t))
        key = shape_key(inputs) + tuple((tuple(t.shape), t.dtype) for t in rows) + (("step", step),)
        if key not in self.shapes and len(self.shapes) >= self.max_graphs:
            self.eager_steps += 1
            self._warn_once("count", f"graph mode ({self.forward}): {self.max_graphs} shapes are compiled "
                            f"(max_graphs); steps of other shapes run eager")
            return None
        static, static_rows = self._static_inputs(key, inputs, rows)
        full_key = (self.forward, self.backend, self.mode, key)
        new = full_key not in compiled_shapes
        args = (self.model, static, self.model_caches) + ((*static_rows, step) if self.forward == "mtp" else ())
        start = time.perf_counter()
        try:
            out = self.fn(*args)
        except Exception as error:  # a graph break or an op the backend cannot compile
            raise GraphModeError(
                f"graph mode (enforce_eager=False, compile_backend={self.backend!r}) could not compile the "
                f"{self.forward} forward as one graph: {type(error).__name__}: {str(error)[:2000]}; pass "
                f"enforce_eager=True to run eager") from error
        if new:
            seconds = time.perf_counter() - start
            compiled_shapes[full_key] = seconds
            if self.first_compile_s is None:
                self.first_compile_s = seconds
                logger.info("graph mode: first %s graph compiled in %.1f s (backend=%s)", self.forward, seconds,
                            self.backend)
        self.shapes.add(key)
        self.graph_steps += 1
        return out.index_select(0, real_rows)

    model_caches = None  # set by the model runner once the caches exist

    def _static_inputs(self, key: tuple, inputs: StepInputs, rows: list[torch.Tensor]):
        """The persistent buffers of ``key`` (step inputs, per-token inputs), holding these values (made on first
        use): a captured graph replays on their addresses."""
        held = self.static.get(key)
        if held is None:
            held = self.static[key] = (inputs, rows)
            if self.mode == "reduce-overhead":
                mark_static_tensors(held)
            return held
        static, static_rows = held
        for f in dataclasses.fields(inputs):
            value = getattr(inputs, f.name)
            if isinstance(value, torch.Tensor):
                getattr(static, f.name).copy_(value)
        for buffer, value in zip(static_rows, rows):
            buffer.copy_(value)
        return held


def shape_key(inputs: StepInputs) -> tuple:
    """What a compiled graph is specialised on: every tensor's shape and dtype, the split counts."""
    parts = []
    for f in dataclasses.fields(inputs):
        value = getattr(inputs, f.name)
        if isinstance(value, torch.Tensor):
            parts.append((f.name, tuple(value.shape), value.dtype))
        elif isinstance(value, int) and not isinstance(value, bool):
            parts.append((f.name, value))
        elif value is None:
            parts.append((f.name, None))
    return tuple(parts)



def mark_static_tensors(root) -> None:
    """``torch._dynamo.mark_static_address`` on every tensor reachable from ``root`` through attributes,
    lists, tuples and dicts (the model's weights, the caches, the static step buffers)."""
    seen, stack = set(), [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            torch._dynamo.mark_static_address(obj)
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (str, bytes, int, float, type, torch.device, torch.dtype)) or obj is None:
            continue
        else:
            # An object's attributes; a bound method's object; a function's default arguments (the MTP's
            # dense MLP is a lambda holding its weights there).
            stack.extend(getattr(obj, "__dict__", {}).values())
            stack.extend(x for x in (getattr(obj, "__self__", None),) if x is not None)
            stack.extend(getattr(obj, "__defaults__", None) or ())
