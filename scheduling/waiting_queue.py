"""The waiting queue, ordered by the scheduling policy."""

import heapq
from collections import deque

from .request import Request


class FCFSQueue:
    """First come, first served; a preempted request goes back to the front."""

    def __init__(self):
        self._queue: deque[Request] = deque()

    def add(self, request: Request) -> None:
        self._queue.append(request)

    def prepend(self, request: Request) -> None:
        self._queue.appendleft(request)

    def peek(self) -> Request:
        return self._queue[0]

    def pop(self) -> Request:
        return self._queue.popleft()

    def remove(self, request: Request) -> None:
        self._queue.remove(request)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self):
        return iter(self._queue)


class PriorityQueue:
    """Smallest (priority, arrival_time, request_id) first; a preempted request is re-queued by that key."""

    def __init__(self):
        self._heap: list[Request] = []

    def add(self, request: Request) -> None:
        heapq.heappush(self._heap, request)

    prepend = add  # a heap has no front: order is the key's

    def peek(self) -> Request:
        return self._heap[0]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)

    def remove(self, request: Request) -> None:
        self._heap.remove(request)
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self):
        return iter(sorted(self._heap))


def make_waiting_queue(policy: str):
    """The queue for a policy name ("fcfs" or "priority")."""
    return PriorityQueue() if policy == "priority" else FCFSQueue()
