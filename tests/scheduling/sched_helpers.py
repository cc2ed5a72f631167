"""Small builders shared by the scheduling tests."""

from qwen_ops.scheduling import Request, Scheduler, SchedulerConfig


def make_scheduler(**overrides) -> Scheduler:
    """A scheduler with small, hand-checkable defaults."""
    config = dict(max_num_batched_tokens=16, max_num_seqs=4, block_size=4, num_blocks=33, max_model_len=64)
    config.update(overrides)
    return Scheduler(SchedulerConfig(**config))


def make_request(request_id: str, prompt_len: int, max_tokens: int = 4, *, arrival: float = 0.0, token: int = 7,
                 **kwargs) -> Request:
    """A request whose prompt is `prompt_len` copies of `token`."""
    return Request(request_id, [token] * prompt_len, max_tokens, arrival_time=arrival, **kwargs)


def step(scheduler: Scheduler, token: int = 1, sampled=None):
    """One schedule() plus update_from_output() where every sampling request gets `token`."""
    out = scheduler.schedule()
    if sampled is None:
        sampled = {r: [token] for r in out.sampling_req_ids}
    results = scheduler.update_from_output(out, sampled)
    return out, results
