"""Faults injected into a running ``LLMEngine`` at each stage of a step, by wrapping its parts (no hooks in the engine).

    injector = FaultInjector(engine)
    injector.arm("forward", request_id="r1")   # the next step that runs r1 raises InjectedFault in its forward
    ...
    injector.close()                           # the engine's own methods back

Each stage's fault fires after the stage did its work, the harshest moment: the scheduler allocated the
request's pages ("schedule": inside ``schedule()``, right after ``allocate_slots`` of that request, or at its
end, the running requests' cursors advanced, when that request is running); the
forward wrote the KV and GDN pages, which are then overwritten with garbage, so nothing the failed step
wrote can be trusted ("forward"); the step sampled its tokens ("sampling", the target's logits or greedy
head; with MTP the verify step); the MTP head drafted ("drafting"); the scheduler applied the tokens
("update"); the engine recorded the request's tokens ("output", in ``_apply``). Used by the fault tests
(``tests/model/test_step_faults.py``) and the seeded simulation (``simulation.py``).
"""
from __future__ import annotations

import torch

STAGES = ("schedule", "forward", "sampling", "drafting", "update", "output")

GARBAGE = 3.0  # what a failed forward leaves in the pages it wrote: finite (masked slots stay harmless), wrong


class InjectedFault(RuntimeError):
    """The error an armed stage raises."""


class FaultInjector:
    """Wraps the engine's scheduler, model runner and model so that an armed stage raises once.

    ``arm(stage, request_id)``: the next step in which ``stage`` runs with ``request_id`` among the step's
    requests (any request when None) raises there. ``fired``: (stage, the step's request ids) of each fault.
    """

    def __init__(self, engine):
        self.engine = engine
        self.armed: tuple[str, str | None] | None = None
        self.fired: list[tuple[str, list[str]]] = []
        self._step = None  # the scheduler output of the step running
        self._saved: list[tuple[object, str, object]] = []
        runner, scheduler = engine.model_runner, engine.scheduler
        self._wrap(scheduler.kv_cache, "allocate_slots", self._after_allocate)
        self._wrap(scheduler, "_record_admitted", self._after_admission)
        self._wrap(runner, "execute", None, before=self._remember_step)
        self._wrap(runner, "_forward", self._after_forward)
        self._wrap(engine.model, "greedy_tokens", self._after("sampling"))
        self._wrap(engine.model, "compute_logits", self._after("sampling"))
        if runner.spec is not None:
            self._wrap(runner.spec, "propose", self._after("drafting"))
        self._wrap(scheduler, "update_from_output", self._after("update"))
        self._wrap(engine, "_apply", self._after_apply)

    # ------------------------------------------------------------------ control

    def arm(self, stage: str, request_id: str | None = None) -> None:
        if stage not in STAGES:
            raise ValueError(f"FaultInjector.arm: stage must be one of {STAGES}, got {stage!r}")
        self.armed = (stage, request_id)

    def close(self) -> None:
        """Put the engine's own methods back."""
        for owner, name, original in reversed(self._saved):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._saved = []

    # ------------------------------------------------------------------ wrapping

    def _wrap(self, owner, name: str, after, before=None) -> None:
        original = getattr(owner, name)
        self._saved.append((owner, name, owner.__dict__.get(name)))

        def wrapped(*args, **kwargs):
            if before is not None:
                before(*args, **kwargs)
            result = original(*args, **kwargs)
            if after is not None:
                after(result, *args, **kwargs)
            return result

        setattr(owner, name, wrapped)

    def _fire(self, stage: str, request_ids) -> None:
        if self.armed is None or self.armed[0] != stage:
            return
        request_ids = list(request_ids)
        if self.armed[1] is not None and self.armed[1] not in request_ids:
            return
        self.armed = None
        self.fired.append((stage, request_ids))
        raise InjectedFault(f"injected fault at {stage}")

    def _step_ids(self):
        return list(self._step.num_scheduled_tokens) if self._step is not None else []

    def _remember_step(self, scheduler_output, *args, **kwargs) -> None:
        self._step = scheduler_output

    def _after(self, stage: str):
        def check(result, *args, **kwargs):
            if self._step is not None:  # serving steps only (not scoring or calibration)
                self._fire(stage, self._step_ids())
        return check

    def _after_allocate(self, result, request, *args, **kwargs) -> None:
        if result is not None:  # the request got its pages
            self._fire("schedule", [request.request_id])

    def _after_admission(self, result, *args, **kwargs) -> None:
        # The end of schedule(): every running request's cursor advanced, the admitted ones' too.
        self._fire("schedule", [r.request_id for r in self.engine.scheduler.running])

    def _after_forward(self, result, meta, *args, **kwargs) -> None:
        if self._step is None or self.armed is None or self.armed[0] != "forward":
            return
        ids = self._step_ids()
        if self.armed[1] is not None and self.armed[1] not in ids:
            return
        poison_step_pages(self.engine, self._step)
        self._fire("forward", ids)

    def _after_apply(self, result, core_output, *args, **kwargs) -> None:
        # After the engine recorded this request's tokens: the rest of the step's results are not recorded.
        if self.armed is not None and self.armed[0] == "output":
            self._fire("output", [core_output.request_id] if self.armed[1] is not None else self._step_ids())


def poison_step_pages(engine, scheduler_output) -> None:
    """Overwrite with garbage every page of the step's requests that the prefix cache did not hold before the
    step (attention KV, MTP KV and GDN states): what a forward that failed half-way may leave. Pages cached
    before the step hold other steps' results, which a failed step never writes. Where the GDN states live
    outside the pages ("chunk" prefix caching), the step's state rows and the checkpoint slots it saves into
    are overwritten too."""
    pool = engine.scheduler.kv_cache.pool
    written_now = set(pool.registered_in_step)
    pages = set()
    for request_id in scheduler_output.num_scheduled_tokens:
        tables = scheduler_output.group_block_ids.get(request_id) or (scheduler_output.block_ids[request_id],)
        for table in tables:
            pages.update(b for b in table if b != 0 and (pool.block_hash[b] is None or b in written_now))
    caches = engine.caches
    state_pools = (caches.conv_states, caches.ssm_states)
    targets = [(pools, pages) for pools in (caches.key_caches, caches.value_caches)]
    if caches.gdn_in_pages:
        targets += [(pools, pages) for pools in state_pools]
    else:
        rows = {scheduler_output.state_slots[r] for r in scheduler_output.num_scheduled_tokens
                if r in scheduler_output.state_slots}
        slots = {slot for saves in scheduler_output.gdn_checkpoint_saves.values() for _, slot in saves}
        targets += [(pools, rows) for pools in state_pools]
        targets += [(pools, slots) for pools in (caches.checkpoint_conv, caches.checkpoint_ssm)]
    for pools, ids in targets:
        if not ids:
            continue
        index = torch.tensor(sorted(ids), dtype=torch.long)
        for tensor in pools.values():
            value = 100 if tensor.dtype == torch.int8 else GARBAGE
            tensor.index_fill_(0, index.to(tensor.device), value)
