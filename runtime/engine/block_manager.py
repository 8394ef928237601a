"""Paged KV-cache bookkeeping: which pool blocks hold which sequence's tokens, with prefix caching.

    bm = BlockManager(n_blocks, block_size)
    table = bm.allocate(seq_id, prompt_ids)          # None when the pool is full; the first
                                                     # table.num_cached_tokens tokens are already in the cache
    bm.mark_computed(seq_id, token_ids, n)           # the KV of token_ids[:n] is written: its full blocks
                                                     # become reusable prefixes for later sequences
    bm.append_slots(seq_id, k)                       # room for k more tokens; None when the pool is full
    bm.truncate(seq_id, n)                           # give back slots past n (rejected draft tokens)
    bm.block_table(seq_id).block_ids                 # its blocks in position order (a step's slots: step_batch.py)
    bm.block_table(seq_id).array                     # the same as int32, read-only (a step's block table row)
    bm.free(seq_id)

A full block is keyed by blake2b(parent block's key, its token ids), so a key names the whole prefix. Only
full, computed blocks are shared; a sequence writes only to blocks it holds alone. Free blocks wait in one
queue, taken from the head: never-cached blocks first, then cached ones least recently freed first (a freed
sequence's blocks are queued last block first, so its shared prefix outlives its tail). Taking a cached block
evicts its key. A sequence longer than n_blocks * block_size tokens never fits: check before allocating.
"""

from __future__ import annotations

import hashlib
import numbers
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np


class BlockTable(NamedTuple):
    """A snapshot of one sequence's table. block_ids[i] holds positions [i * block_size, (i + 1) * block_size);
    num_slots: positions with a slot; num_cached_tokens: leading positions found in the prefix cache at allocate.
    A named tuple: one is made per sequence per step (a frozen dataclass cost 3-4 us of the step's host time).
    array: block_ids as a read-only int32 array, made when the blocks change (once per block_size tokens), so that a
    step's [S, max_blocks] table is a copy per row, not a conversion of every id every step (16 rows of 64 blocks:
    39 us -> 8 us, Zen 3; a long context's rows grow with it). With the array in it a table is neither hashable nor
    comparable with ==: compare block_ids."""

    block_ids: tuple[int, ...]
    num_slots: int
    num_cached_tokens: int
    array: np.ndarray


class _Seq:
    __slots__ = ("array", "blocks", "ids", "keys", "num_cached", "num_registered", "num_slots")

    def __init__(self, blocks: list[int], num_slots: int, keys: list[bytes], num_cached_blocks: int, block_size: int):
        self.blocks = blocks  # pool block ids, in position order
        self.ids, self.array = _frozen(blocks)  # the same, as the tables give them out; remade whenever blocks changes
        self.num_slots = num_slots
        self.keys = keys  # prefix keys of the leading full blocks whose tokens are known
        self.num_registered = num_cached_blocks  # leading blocks that are computed and offered to the cache
        self.num_cached = num_cached_blocks * block_size


def _frozen(blocks: list[int]) -> tuple[tuple[int, ...], np.ndarray]:
    """blocks as a tuple and as a read-only int32 array."""
    array = np.array(blocks, dtype=np.int32)
    array.flags.writeable = False
    return tuple(blocks), array


def _is_int(value) -> bool:
    """An integer that is not a bool; a plain int without the ABC's check (per sequence per step)."""
    return type(value) is int or (not isinstance(value, bool) and isinstance(value, numbers.Integral))


def _count(name: str, value, lo: int) -> int:
    if not _is_int(value) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


class BlockManager:
    """n_blocks blocks of block_size token slots each; slot s is offset s % block_size of block s // block_size.
    seq_id: any hashable. Misuse (an unknown or freed seq_id, a bad count) raises ValueError."""

    def __init__(self, n_blocks: int, block_size: int):
        self.n_blocks = _count("n_blocks", n_blocks, 1)
        self.block_size = _count("block_size", block_size, 1)
        self._ref = [0] * self.n_blocks  # tables holding each block
        self._key: list[bytes | None] = [None] * self.n_blocks  # key a block is registered under
        self._cached: dict[bytes, int] = {}  # key -> block id
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(self.n_blocks))  # head is taken first
        self._seqs: dict[Hashable, _Seq] = {}

    @property
    def num_free_blocks(self) -> int:
        """Blocks with no holder, cached ones included (they are evicted on demand)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        """Blocks held by at least one live sequence."""
        return self.n_blocks - len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        """Free blocks that still hold a cached prefix (evicted only when the pool needs them)."""
        return sum(1 for b in self._cached.values() if self._ref[b] == 0)

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that num_tokens slots take (a scheduler's admission check against n_blocks)."""
        return -(-num_tokens // self.block_size)

    def allocate(self, seq_id: Hashable, token_ids: Sequence[int], reuse: bool = True) -> BlockTable | None:
        """Slots for token_ids, reusing the longest cached prefix of full blocks (never the block holding the
        last token: its logits must be computed; with reuse False none: every row is computed). None, with nothing
        changed, when the pool is too full."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} is already allocated")
        n = len(token_ids)
        if n == 0:
            raise ValueError("token_ids must not be empty")
        bs = self.block_size
        keys = self._extend_keys([], token_ids, n // bs)
        hits = []
        for i, key in enumerate(keys if reuse else ()):
            b = self._cached.get(key)
            if b is None or (i + 1) * bs > n - 1:
                break
            hits.append(b)
        need = self.blocks_needed(n) - len(hits)
        if need > len(self._free) - sum(1 for b in hits if self._ref[b] == 0):
            return None
        for b in hits:
            if self._ref[b] == 0:
                del self._free[b]
            self._ref[b] += 1
        seq = _Seq(hits + [self._take_free() for _ in range(need)], n, keys, len(hits), bs)
        self._seqs[seq_id] = seq
        return self._table(seq)

    def append_slots(self, seq_id: Hashable, n: int) -> BlockTable | None:
        """Slots for n more positions. None, with nothing changed, when the pool is too full."""
        seq = self._seq(seq_id)
        n = _count("n", n, 0)
        need = self.blocks_needed(seq.num_slots + n) - len(seq.blocks)
        if need > len(self._free):
            return None
        if need:
            seq.blocks.extend(self._take_free() for _ in range(need))
            seq.ids, seq.array = _frozen(seq.blocks)
        seq.num_slots += n
        return self._table(seq)

    def truncate(self, seq_id: Hashable, num_tokens: int) -> BlockTable:
        """Keeps slots for positions [0, num_tokens) only; blocks past them go back to the pool.
        num_tokens may not reach back into blocks already offered to the cache."""
        seq = self._seq(seq_id)
        lo = seq.num_registered * self.block_size
        if not _is_int(num_tokens) or not (lo <= num_tokens <= seq.num_slots):
            raise ValueError(f"num_tokens must be an integer in [{lo}, {seq.num_slots}], got {num_tokens!r}")
        keep = self.blocks_needed(num_tokens)
        for b in reversed(seq.blocks[keep:]):
            self._release(b)
        if keep < len(seq.blocks):
            del seq.blocks[keep:]
            seq.ids, seq.array = _frozen(seq.blocks)
        del seq.keys[num_tokens // self.block_size :]
        seq.num_slots = int(num_tokens)
        return self._table(seq)

    def mark_computed(self, seq_id: Hashable, token_ids: Sequence[int], num_computed: int) -> None:
        """The KV of token_ids[:num_computed] (the sequence's tokens from position 0) is written: its full
        blocks are offered to the prefix cache. A key already cached under another block keeps that block."""
        seq = self._seq(seq_id)
        if not _is_int(num_computed) or not (0 <= num_computed <= min(len(token_ids), seq.num_slots)):
            raise ValueError(
                f"num_computed must be an integer in [0, {min(len(token_ids), seq.num_slots)}], got {num_computed!r}"
            )
        full = int(num_computed) // self.block_size
        self._extend_keys(seq.keys, token_ids, full)
        for i in range(seq.num_registered, full):
            b, key = seq.blocks[i], seq.keys[i]
            if key not in self._cached:
                self._cached[key] = b
                self._key[b] = key
        seq.num_registered = max(seq.num_registered, full)

    def free(self, seq_id: Hashable) -> None:
        seq = self._seq(seq_id)
        del self._seqs[seq_id]
        for b in reversed(seq.blocks):
            self._release(b)

    def block_table(self, seq_id: Hashable) -> BlockTable:
        return self._table(self._seq(seq_id))

    def _seq(self, seq_id: Hashable) -> _Seq:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise ValueError(f"unknown sequence {seq_id!r} (never allocated, or already freed)")
        return seq

    def _table(self, seq: _Seq) -> BlockTable:
        return BlockTable(seq.ids, seq.num_slots, seq.num_cached, seq.array)

    def _extend_keys(self, keys: list[bytes], token_ids: Sequence[int], n_full: int) -> list[bytes]:
        bs, first = self.block_size, len(keys)
        if n_full > first:
            ids = np.asarray(token_ids[first * bs : n_full * bs], dtype=np.int64)
            for i in range(first, n_full):
                block = ids[(i - first) * bs : (i - first + 1) * bs].tobytes()
                keys.append(hashlib.blake2b((keys[i - 1] if i else b"") + block, digest_size=16).digest())
        return keys

    def _take_free(self) -> int:
        b, _ = self._free.popitem(last=False)
        key = self._key[b]
        if key is not None:
            del self._cached[key]
            self._key[b] = None
        self._ref[b] = 1
        return b

    def _release(self, b: int) -> None:
        self._ref[b] -= 1
        if self._ref[b] == 0:
            self._free[b] = None
            if self._key[b] is None:
                self._free.move_to_end(b, last=False)
