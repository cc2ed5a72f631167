"""What ``LLMEngine.step()`` raises when a step fails, and how many failed steps in a row end a request.

A step is all or nothing: when any stage of it raises (scheduling, the forward, sampling, MTP drafting,
applying the sampled tokens, building the outputs), the engine rolls the step's requests back as
preemption by recompute does (``Scheduler.rollback_step``, ``ModelRunner.discard_step``): their pages are
freed (the failed forward may have half-written them, so nothing it registered in the prefix cache stays
reachable), their tokens so far are kept, and they re-prefill and go on at a later step. A request charged
with ``MAX_CONSECUTIVE_STEP_FAILURES`` failed steps in a row (its re-prefill does not break the row: only
getting past where it failed does) ends instead with ``finish_reason="error"``; rolled-back requests come
back one at a time, so a second fault is charged to one of them. Then the engine raises
``StepFailedError`` once, from the original exception; the next ``step()`` serves on (docs/engine.md,
"When a step fails").
"""
from __future__ import annotations

# The failed steps in a row after which a request ends with finish_reason "error" rather than being retried
# (an engine's own limit is its ``max_consecutive_step_failures``): one fault may be transient, a second on
# the same request most likely is not, and retrying it forever would loop.
MAX_CONSECUTIVE_STEP_FAILURES = 2

# The stages a step goes through, in order (``StepFailedError.stage``).
STEP_STAGES = ("schedule", "prepare", "forward", "sampling", "drafting", "update", "output")


class StepFailedError(RuntimeError):
    """A step raised; the engine rolled it back and serves on (see the module docstring).

    stage: where it failed, one of ``STEP_STAGES``.
    request_ids: the requests the failure touched (the step's, or every unfinished one when scheduling
        failed): each was rolled back to retry, or ended (``errored_request_ids``).
    errored_request_ids: those among them that ended with finish_reason "error"; their outputs
        (``finished=True``) come in the next ``step()``'s list.
    The original exception is ``__cause__``.
    """

    def __init__(self, stage: str, request_ids: list[str], errored_request_ids: list[str], cause: BaseException):
        self.stage = stage
        self.request_ids = list(request_ids)
        self.errored_request_ids = list(errored_request_ids)
        retried = [r for r in self.request_ids if r not in set(self.errored_request_ids)]
        super().__init__(
            f"engine step failed at {stage!r} ({type(cause).__name__}: {cause}); rolled back requests "
            f"{retried} to retry" + (f", ended requests {self.errored_request_ids} with finish_reason 'error'"
                                     if self.errored_request_ids else ""))
