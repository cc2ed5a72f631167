"""Compact GDN state rows for engines that keep GDN states outside the block pool: one per running request.

Not dead, though the engine's serving path reads its GDN states from the pool's pages
(``SchedulerOutput.group_block_ids``, ``model/worker/gdn_pages.py``): ``SchedulerOutput.state_slots``
becomes ``StepMetadata.state_indices``, which the model's runs on flat state pools read (the model
runner's scoring and INT8 calibration passes, the model and scheduling tests), and which the persistent
batch checks against its rows. vLLM has no such field; the scheduler's vLLM comparisons leave it out.
"""


class StateSlotPool:
    """Hands out state row ids in [0, max_num_seqs) (where an engine keeps a request's recurrent and conv state).

    Never an admission limit: the scheduler admits by KV blocks, GDN pages
    included, and max_num_seqs, as vLLM does, so a row is always free for an
    admitted request. A request holds one row from admission until it finishes
    or is preempted. The GDN pages of vLLM's layout are in
    SchedulerOutput.group_block_ids.
    """

    def __init__(self, num_slots: int):
        # A stack popped from the end: slot 0 is handed out first, a freed slot is reused first.
        self._free = list(range(num_slots - 1, -1, -1))
        self.num_slots = num_slots

    @property
    def num_free_slots(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        """Take a free slot; raises if none is left (callers check num_free_slots first)."""
        if not self._free:
            raise RuntimeError("no free GDN state slot")
        return self._free.pop()

    def free(self, slot: int) -> None:
        """Give a slot back."""
        self._free.append(slot)

    def reclaim_all(self) -> None:
        """Make every slot free again; only when no request holds one (a failed schedule() may have
        taken one and given it to nobody)."""
        self._free = list(range(self.num_slots - 1, -1, -1))
