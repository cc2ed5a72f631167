"""Fixed pool of GDN state slots for hybrid models: one slot per running request."""


class StateSlotPool:
    """Hands out state slot ids (the recurrent and conv state of the GDN layers).

    A request holds one slot from admission until it finishes or is preempted.
    Unlike KV blocks, a slot never grows, so a running request never needs a new one.
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
