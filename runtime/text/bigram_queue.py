"""llama.cpp's bigram merge queue, shared by the BPE and SentencePiece tokenizers.

merge_by_queue(parts, priority): repeatedly merges the adjacent pair with the smallest priority(a, b)
(ties: leftmost), where priority returns None for pairs that never merge. A min-heap of
(priority, left, right, merged length) over a linked list of parts; a queued pair is stale when
either side was merged away or has grown since. Returns the merged parts in order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any


def merge_by_queue(parts: list[str], priority: Callable[[str, str], Any | None]) -> list[str]:
    n = len(parts)
    nxt = [*range(1, n), -1]
    prv = [*range(-1, n - 1)]
    heap = []
    for i in range(n - 1):
        p = priority(parts[i], parts[i + 1])
        if p is not None:
            heap.append((p, i, i + 1, len(parts[i]) + len(parts[i + 1])))
    heapq.heapify(heap)
    while heap:
        _, left, right, size = heapq.heappop(heap)
        a, b = parts[left], parts[right]
        if not a or not b or len(a) + len(b) != size:
            continue  # one side was merged away or grew since this pair was queued
        parts[left], parts[right] = a + b, ""
        nx = nxt[right]
        nxt[left] = nx
        if nx >= 0:
            prv[nx] = left
        pv = prv[left]
        if pv >= 0:
            p = priority(parts[pv], parts[left])
            if p is not None:
                heapq.heappush(heap, (p, pv, left, len(parts[pv]) + len(parts[left])))
        if nx >= 0:
            p = priority(parts[left], parts[nx])
            if p is not None:
                heapq.heappush(heap, (p, left, nx, len(parts[left]) + len(parts[nx])))
    return [p for p in parts if p]
