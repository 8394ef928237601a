"""The n-gram table shared by the requests of one model: what finished requests generated, for drafting where a
sequence's own tokens have no match (llama.cpp's lookup decoding keeps such a "dynamic" cache).

    table = NgramTable(max_entries=1 << 18)
    table.learn(tokens, start)              # the n-grams of tokens whose follower lies at or after `start`
    table.queue(tokens, start)              # the same, learned later: by learn_queued()
    table.learn_queued(limit)               # up to `limit` queued followers, oldest first (None: all); how many
    n, drafts = table.draft(tokens, k)      # up to k tokens, chained: each looked up after the ones before it;
                                            # n: the length of the n-gram the first one followed (0: none)

Entries: an n-gram (n from min_n to max_n) -> the token that followed it most recently. Bounded: past max_entries
the least recently written or read entries go first. A request that repeats an earlier one (a regenerated reply,
the same question from two clients, the same boilerplate in two files) drafts from it; chaining continues a
draft as long as the table knows what follows the text so far, the longest n-gram first. Engine thread only.

Learning costs about 3.5 us a token (7 n-grams; Zen 3): 16 replies of 1,024 tokens that end together would hold
every other stream up for some 60 ms if learned at once. The engine queues them instead and learns a slice each
step (drafter.py), the rest when it is idle.
"""

from __future__ import annotations

from collections import OrderedDict, deque
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
        self._queued: deque[list] = deque()  # [tokens (a tuple), next follower's position] to learn, oldest first
        # followers queued at most: as many as the table holds n-grams of (older ones would be evicted by the newer
        # once learned), so that a server busier than a slice a step drops its oldest instead of growing
        self.max_queued = max(1, max_entries // (max_n - min_n + 1))

    def clear(self) -> None:
        self._next.clear()
        self._queued.clear()

    @property
    def num_queued(self) -> int:
        """Followers queued and not learned yet."""
        return sum(len(tokens) - i for tokens, i in self._queued)

    def __len__(self) -> int:
        return len(self._next)

    def learn(self, tokens: Sequence[int], start: int = 0) -> None:
        """Records, for every position i >= max(start, 1), each n-gram ending at i - 1 -> tokens[i]."""
        self._learn(tuple(tokens), max(start, 1), len(tokens))

    def queue(self, tokens: Sequence[int], start: int = 0) -> None:
        """learn(tokens, start), deferred to learn_queued() (the tokens are copied: the caller may change its list).
        Past max_queued followers waiting, the oldest are dropped unlearned."""
        lo = max(start, 1)
        if lo < len(tokens):
            keep = max(lo - self.max_n, 0)  # the n-grams before lo are context only
            self._queued.append([tuple(tokens[keep:]), lo - keep])
            over = self.num_queued - self.max_queued
            while over > 0:  # the oldest followers go first
                item = self._queued[0]
                tokens_, i = item
                drop = min(over, len(tokens_) - i)
                if drop == len(tokens_) - i:
                    self._queued.popleft()
                else:
                    item[1] = i + drop
                over -= drop

    def learn_queued(self, limit: int | None = None) -> int:
        """Learns up to `limit` queued followers (None: every one), in the order queue() took them; the number."""
        done = 0
        while self._queued and (limit is None or done < limit):
            item = self._queued[0]
            tokens, lo = item
            hi = len(tokens) if limit is None else min(len(tokens), lo + limit - done)
            self._learn(tokens, lo, hi)
            done += hi - lo
            if hi == len(tokens):
                self._queued.popleft()
            else:
                item[1] = hi
        return done

    def _learn(self, tokens: tuple[int, ...], lo: int, hi: int) -> None:
        """Followers tokens[lo:hi] (lo >= 1), each after its n-grams; least recently used entries past the bound go."""
        table = self._next
        pop = table.pop
        lo_n, hi_n = self.min_n, self.max_n
        for i in range(lo, hi):
            follower = tokens[i]
            for n in range(lo_n, min(hi_n, i) + 1):
                key = tokens[i - n : i]  # a tuple: slicing one makes one
                pop(key, None)  # re-inserted last: the most recently written
                table[key] = follower
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
