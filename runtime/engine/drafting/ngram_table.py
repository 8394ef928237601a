"""The n-gram table shared by the requests of one model: what finished requests generated, for drafting where a
sequence's own tokens have no match (llama.cpp's lookup decoding keeps such a "dynamic" cache).

    table = NgramTable(max_entries=1 << 18)
    table.learn(tokens, start)              # the n-grams of tokens whose follower lies at or after `start`
    n, drafts = table.draft(tokens, k)      # up to k tokens, chained: each looked up after the ones before it;
                                            # n: the length of the n-gram the first one followed (0: none)

Entries: an n-gram (n from min_n to max_n) -> the token that followed it most recently. Bounded: past max_entries
the least recently written or read entries go first. A request that repeats an earlier one (a regenerated reply,
the same question from two clients, the same boilerplate in two files) drafts from it; chaining continues a
draft as long as the table knows what follows the text so far, the longest n-gram first. Engine thread only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

DEFAULT_MAX_ENTRIES = 1 << 18  # some 60 MB of Python tuples at most


class NgramTable:
    def __init__(self, max_n: int = 8, min_n: int = 2, max_entries: int = DEFAULT_MAX_ENTRIES):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be positive, got {max_entries}")
        self.max_n, self.min_n, self.max_entries = max_n, min_n, max_entries
        self._next: OrderedDict[tuple[int, ...], int] = OrderedDict()

    def clear(self) -> None:
        self._next.clear()

    def __len__(self) -> int:
        return len(self._next)

    def learn(self, tokens: Sequence[int], start: int = 0) -> None:
        """Records, for every position i >= max(start, 1), each n-gram ending at i - 1 -> tokens[i]."""
        table = self._next
        for i in range(max(start, 1), len(tokens)):
            follower = tokens[i]
            for n in range(self.min_n, min(self.max_n, i) + 1):
                key = tuple(tokens[i - n : i])
                table[key] = follower
                table.move_to_end(key)
        while len(table) > self.max_entries:
            table.popitem(last=False)

    def draft(self, tokens: Sequence[int], k: int) -> tuple[int, list[int]]:
        """(n, up to k tokens) to follow tokens: each the recorded follower of the longest n-gram ending the text so
        far (tokens plus the drafts before it), stopping where the table knows nothing; n: the length of the
        n-gram the first token followed, 0 when none matched."""
        table = self._next
        ctx = list(tokens[-self.max_n :])
        out: list[int] = []
        first = 0
        while len(out) < k:
            for n in range(min(self.max_n, len(ctx)), self.min_n - 1, -1):
                key = tuple(ctx[len(ctx) - n :])
                t = table.get(key)
                if t is not None:
                    table.move_to_end(key)
                    break
            else:
                break
            first = first or n
            out.append(t)
            ctx.append(t)
            del ctx[: -self.max_n]
        return first, out
