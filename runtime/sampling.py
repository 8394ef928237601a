"""Sampling: validated parameters, the logit-processor chain, and stop strings over streamed text.

    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, seed=1)   # ValueError names a bad field
    sampler = Sampler(params)                      # one per request: it owns that request's RNG
    tid = sampler.sample(logits_row, history)      # logits_row: [n_vocab] float; history: the sequence's token ids
    stop = StopChecker(params.stop)
    send(stop.push(text)); ...; send(stop.flush())

Chain order is llama.cpp's: logit_bias added first, then penalties (over the last `penalty_last_n` tokens of `history`), top-k, top-p,
min-p, temperature, then one draw. top-p and min-p see untempered probabilities. temperature == 0 is greedy:
the argmax of the penalized row, no RNG draw. Every sampled (temperature > 0) token consumes exactly one
uniform draw from the request's own generator, so the same seed gives the same tokens however requests are batched.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .model.candidates import CandidateRow

_SUBSAMPLE = 4096  # rows longer than this find their top-m through a threshold estimated on a strided subsample
_CHUNK = 1024  # inverse-CDF draw over a full row: chunk sums first, then one chunk's cumulative sum


def _real(name: str, value, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    v = float(value)
    if v < lo or v > hi or (lo_open and v == lo) or (hi_open and v == hi):
        lb = "(" if lo_open else "["
        rb = ")" if hi_open or math.isinf(hi) else "]"
        hs = "inf" if math.isinf(hi) else f"{hi:g}"
        raise ValueError(f"{name} must be in {lb}{lo:g}, {hs}{rb}, got {value!r}")
    return v


def _integer(name: str, value, lo: int, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        kind = "an integer or None" if optional else "an integer"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings; the constructor raises ValueError naming the first bad field.

    Defaults sample from the model's distribution unchanged (OpenAI semantics); 0 disables top_k,
    1.0 disables top_p, 0.0 disables min_p, 1.0/0.0 disable the penalties.
    penalty_last_n: how many of the most recent history tokens the penalties look at; -1 = all, 0 = none.
    stop: a string or a sequence of non-empty strings, stored as a tuple.
    max_tokens: None = bounded only by the context; 0 = nothing generated (the reply ends at once, "length").
    seed: None = fresh OS entropy per Sampler.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None
    max_tokens: int | None = None
    stop: str | Sequence[str] = ()
    ignore_eos: bool = False
    logit_bias: Mapping[int, float] | Sequence[tuple[int, float]] = ()  # token id -> added to its logit, [-100, 100]

    def __post_init__(self):
        inf = math.inf
        put = object.__setattr__
        put(self, "temperature", _real("temperature", self.temperature, 0.0, inf))
        put(self, "top_k", _integer("top_k", self.top_k, 0))
        put(self, "top_p", _real("top_p", self.top_p, 0.0, 1.0, lo_open=True))
        put(self, "min_p", _real("min_p", self.min_p, 0.0, 1.0))
        put(self, "repetition_penalty", _real("repetition_penalty", self.repetition_penalty, 0.0, inf, lo_open=True))
        put(self, "presence_penalty", _real("presence_penalty", self.presence_penalty, -2.0, 2.0))
        put(self, "frequency_penalty", _real("frequency_penalty", self.frequency_penalty, -2.0, 2.0))
        put(self, "penalty_last_n", _integer("penalty_last_n", self.penalty_last_n, -1))
        put(self, "seed", _integer("seed", self.seed, 0, optional=True))
        put(self, "max_tokens", _integer("max_tokens", self.max_tokens, 0, optional=True))
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be a string or a list of non-empty strings, got {self.stop!r}")
        put(self, "stop", tuple(stop))
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be a bool, got {self.ignore_eos!r}")
        pairs = self.logit_bias.items() if isinstance(self.logit_bias, Mapping) else self.logit_bias
        bias = []
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ValueError(f"logit_bias must map token ids to numbers, got {self.logit_bias!r}")
            tid = _integer("logit_bias token id", pair[0], 0)
            bias.append((tid, _real(f"logit_bias[{tid}]", pair[1], -100.0, 100.0)))
        put(self, "logit_bias", tuple(sorted(bias)))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


# Candidates flow through the chain as (ids, vals): ids None means vals is the whole row (index = token id);
# otherwise ids: [n] int64 token ids and vals: [n] float32 their logits, n >= 1.
# Whole-row temporaries live in per-thread work buffers: fresh 600 KB arrays per call would cost page faults.

_local = threading.local()


class _Work:
    """Per-thread scratch for rows of length n: row (penalized logits), w (softmax weights), mask."""

    def __init__(self, n: int):
        self.n = n
        self.row = np.empty(n, dtype=np.float32)
        self.w = np.empty(n, dtype=np.float32)
        self.mask = np.empty(n, dtype=bool)


def _work(n: int) -> _Work:
    w = getattr(_local, "work", None)
    if w is None or w.n != n:
        w = _local.work = _Work(n)
    return w


def _largest(x: np.ndarray, m: int, mask: np.ndarray | None = None) -> np.ndarray:
    """Indices of the m largest values of x (1-D), by value descending, ties by index. No full sort of a long
    row: a threshold from a strided subsample (or one partition) selects a superset, then only that is sorted.
    mask: optional [x.size] bool scratch."""
    n = x.size
    if m >= n:
        return np.argsort(-x, kind="stable")
    idx = None
    if n > _SUBSAMPLE:
        stride = n // _SUBSAMPLE
        sub = x[::stride]
        j = min(sub.size, 2 * m // stride + 8)
        thr = np.partition(sub, sub.size - j)[sub.size - j]
        idx = np.flatnonzero(np.greater_equal(x, thr, out=mask))  # holds the top m whenever it has >= m entries
    if idx is None or idx.size < m:
        idx = np.flatnonzero(np.greater_equal(x, np.partition(x, n - m)[n - m], out=mask))
    if idx.size > m:
        v = x[idx]
        idx = idx[v >= np.partition(v, idx.size - m)[idx.size - m]]  # stays in index order, keeps all ties
    return idx[np.argsort(-x[idx], kind="stable")][:m]


@dataclass(frozen=True)
class Penalties:
    """llama.cpp's penalties over the tokens in `window`: a seen token's logit is multiplied by `repeat` when
    <= 0 and divided by it otherwise, then lowered by count * frequency + presence. Writes the result to out."""

    repeat: float
    presence: float
    frequency: float

    def apply(self, row: np.ndarray, window: np.ndarray, out: np.ndarray) -> np.ndarray:
        if window.min() < 0 or window.max() >= row.size:
            raise ValueError(f"history holds a token id outside the vocabulary [0, {row.size})")
        tok, count = np.unique(window, return_counts=True)
        np.copyto(out, row)
        v = out[tok]
        v = np.where(v <= 0, v * self.repeat, v / self.repeat)
        out[tok] = v - (count * self.frequency + self.presence)
        return out


@dataclass(frozen=True)
class TopK:
    """Keeps the k largest logits; output sorted by logit descending."""

    k: int

    def apply(self, ids, vals, work: _Work):
        if self.k >= vals.size:
            return ids, vals
        keep = _largest(vals, self.k, work.mask if ids is None else None)
        return (keep if ids is None else ids[keep]), vals[keep]


@dataclass(frozen=True)
class TopP:
    """Keeps the smallest most-probable prefix whose probability (softmax over the current candidates)
    reaches p; ties are ranked by token id. Output order: by logit descending, except on a flat whole row."""

    p: float

    def apply(self, ids, vals, work: _Work):
        mx = vals.max()
        if ids is None:
            w = np.exp(np.subtract(vals, mx, out=work.w), out=work.w)
            keep = _nucleus(vals, w, self.p * float(w.sum(dtype=np.float64)), work.mask)
            return keep, vals[keep]
        order = np.argsort(-vals, kind="stable")
        cum = np.cumsum(np.exp(vals[order].astype(np.float64) - float(mx)))
        n = min(int(np.searchsorted(cum, self.p * cum[-1])) + 1, order.size)
        return ids[order[:n]], vals[order[:n]]


def _nucleus(vals: np.ndarray, w: np.ndarray, target: float, mask: np.ndarray) -> np.ndarray:
    """Token ids of the shortest prefix of the row ranked by logit (ties by id) whose weight w (= exp(vals - max))
    reaches target. Peaked rows end inside the top 128. Flat rows: the cutoff logit is bracketed between two
    values of a sorted strided subsample (each probe, one masked float32 dot, corrects the subsample's own
    estimate; bisection when that lands outside the bracket), then made exact in float64 by sorting only the
    tokens inside the bracket; a bracket that the float64 check rejects widens until it spans the row."""
    order = _largest(vals, 128, mask)
    cum = np.cumsum(w[order], dtype=np.float64)
    if cum[-1] >= target or order.size == vals.size:
        return order[: min(int(np.searchsorted(cum, target)) + 1, order.size)]
    v_m = vals[order[-1]]
    stride = max(vals.size // _SUBSAMPLE, 1)
    sv = vals[::stride]
    sub = np.sort(sv[sv < v_m])[::-1]  # the subsample below the top 128, descending
    mx = np.float32(vals.max())
    est = cum[-1] + stride * np.cumsum(np.exp(sub - mx), dtype=np.float64)  # est[i] ~ weight of logits >= sub[i]
    a, b = -1, sub.size  # weight(>= sub[a]) < target <= weight(>= sub[b]); sub[-1] = v_m, sub[size] = -inf
    k = int(np.searchsorted(est, target))
    while b - a > 16:
        if not a < k < b:
            k = (a + b) // 2
        f = float(np.dot(w, np.greater_equal(vals, sub[k], out=mask)))  # weight(logits >= sub[k]), float32
        k_est = int(np.searchsorted(est + (f - est[k]), target))  # the estimate, corrected by this probe
        a, b, k = (a, k, k_est - 8) if f >= target else (k, b, k_est + 8)
    for widen in (0, 8, 64, None):
        if widen is not None:
            a, b = a - widen, b + widen
        whole = widen is None or (a < 0 and b >= sub.size)
        hi = v_m if whole or a < 0 else sub[a]
        lo = -np.inf if whole or b >= sub.size else sub[b]
        cand = np.flatnonzero(np.greater_equal(vals, lo, out=mask))
        up = vals[cand] > hi
        above, band = cand[up], cand[~up]
        band = band[np.argsort(-vals[band], kind="stable")]
        mass_above = float(w[above].sum(dtype=np.float64))
        cb = mass_above + np.cumsum(w[band], dtype=np.float64)
        if whole or (mass_above < target and band.size and cb[-1] >= target):
            return np.concatenate([above, band[: min(int(np.searchsorted(cb, target)) + 1, band.size)]])


@dataclass(frozen=True)
class MinP:
    """Keeps the candidates whose probability is at least p times the largest (logit >= max + log p);
    keeps the input order."""

    p: float

    def apply(self, ids, vals, work: _Work | None):
        thr = vals.max() + np.float32(math.log(self.p))
        keep = np.flatnonzero(np.greater_equal(vals, thr, out=work.mask[: vals.size] if work is not None else None))
        return (keep if ids is None else ids[keep]), vals[keep]


class Sampler:
    """Turns one logits row into one token id under `params`. Not thread-safe; one per request.
    chain: the active truncation processors in order; temperature divides the surviving logits in the final
    softmax (llama.cpp applies it after min-p, so it never changes which tokens survive)."""

    def __init__(self, params: SamplingParams):
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        self.params = params
        self._rng = np.random.default_rng(params.seed)
        t = params.temperature
        self._scale = min(max(1.0 / t, 1e-30), 1e30) if t > 0 else 0.0  # 1 / t, finite and nonzero in float32
        p = params
        penalize = p.penalty_last_n != 0 and (
            p.repetition_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0
        )
        self.penalties = Penalties(p.repetition_penalty, p.presence_penalty, p.frequency_penalty) if penalize else None
        chain = []
        if p.top_k > 0:
            chain.append(TopK(p.top_k))
        if p.top_p < 1.0:
            chain.append(TopP(p.top_p))
        if p.min_p > 0.0:
            chain.append(MinP(p.min_p))
        self.chain = tuple(chain)
        b = p.logit_bias  # sorted by id: the last is the largest
        self._bias_ids = np.array([t for t, _ in b], dtype=np.int64) if b else None
        self._bias_vals = np.array([v for _, v in b], dtype=np.float32) if b else None

    def candidates_needed(self) -> int | None:
        """How many candidates per row (localllm.model.candidates) give what the whole row gives: 1 when greedy, top_k
        when the chain starts with it; None when the whole row is needed (penalties read any token's logit, a
        chain without top-k reads every token)."""
        if self.penalties is not None or self.params.logit_bias:
            return None
        if self.params.greedy:
            return 1
        return self.params.top_k if self.chain and isinstance(self.chain[0], TopK) else None

    def _penalized(self, logits, history) -> tuple[np.ndarray | CandidateRow, _Work | None]:
        if isinstance(logits, CandidateRow):
            if self.penalties is not None:
                raise ValueError("a candidates row cannot be penalized: the penalties need the whole row")
            return logits, None
        row = np.asarray(logits)
        if row.ndim != 1 or row.size == 0:
            raise ValueError(f"logits must be a non-empty 1-D row, got shape {row.shape}")
        work = _work(row.size)
        if row.dtype != np.float32 or self._bias_ids is not None:
            np.copyto(work.row, row, casting="unsafe")
            row = work.row
        if self._bias_ids is not None:
            if self._bias_ids[-1] >= row.size:
                raise ValueError(
                    f"logit_bias: token id {int(self._bias_ids[-1])} is outside the vocabulary ({row.size})"
                )
            row[self._bias_ids] += self._bias_vals
        if self.penalties is not None and len(history):
            n = self.params.penalty_last_n
            window = np.asarray(history[-n:] if n > 0 else history, dtype=np.int64)
            row = self.penalties.apply(row, window, work.row)
        return row, work

    def _candidates(self, row: np.ndarray | CandidateRow, work: _Work | None):
        ids, vals = (row.ids, row.vals) if isinstance(row, CandidateRow) else (None, row)
        if not np.isfinite(vals.max() if ids is None else vals[0]):  # candidates: NaN ranks first
            raise ValueError("logits row has no finite maximum (all -inf, +inf or NaN)")
        for proc in self.chain:
            ids, vals = proc.apply(ids, vals, work)
        return ids, vals

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """logits: [n_vocab] float; history: the sequence's token ids so far (prompt and output) for the penalties."""
        row, work = self._penalized(logits, history)
        if self.params.greedy:
            return int(row.ids[0]) if isinstance(row, CandidateRow) else int(np.argmax(row))
        ids, vals = self._candidates(row, work)
        u = self._rng.random()
        if ids is None:
            return _draw_row(vals, self._scale, u, work.w)
        cum = np.cumsum(np.exp((vals.astype(np.float64) - float(vals.max())) * self._scale))
        return int(ids[min(int(np.searchsorted(cum, u * cum[-1], side="right")), ids.size - 1)])

    def distribution(self, logits: np.ndarray, history: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        """The distribution sample() draws from: (ids [n] int64, probs [n] float64 summing to 1), probs > 0.
        Greedy gives the argmax with probability 1. Consumes no randomness (for speculative acceptance)."""
        row, work = self._penalized(logits, history)
        if self.params.greedy:
            top = int(row.ids[0]) if isinstance(row, CandidateRow) else int(np.argmax(row))
            return np.array([top], dtype=np.int64), np.ones(1)
        ids, vals = self._candidates(row, work)
        ids = np.arange(vals.size, dtype=np.int64) if ids is None else ids.astype(np.int64)
        w = np.exp((vals.astype(np.float64) - float(vals.max())) * self._scale)
        w /= w.sum()
        keep = w > 0
        return ids[keep], w[keep]


def _draw_row(vals: np.ndarray, scale: float, u: float, w: np.ndarray) -> int:
    """Inverse-CDF draw from softmax(vals * scale) over a whole row, u uniform in [0, 1); w: [vals.size] float32
    scratch. Chunk sums first, then one chunk's cumulative sum."""
    np.subtract(vals, vals.max(), out=w)
    if scale != 1.0:
        np.multiply(w, np.float32(scale), out=w)
    np.exp(w, out=w)
    starts = np.arange(0, w.size, _CHUNK)
    csum = np.cumsum(np.add.reduceat(w, starts, dtype=np.float64))
    target = u * csum[-1]
    c = min(int(np.searchsorted(csum, target, side="right")), starts.size - 1)
    base = csum[c - 1] if c else 0.0
    local = np.cumsum(w[starts[c] : starts[c] + _CHUNK], dtype=np.float64)
    i = min(int(np.searchsorted(local, target - base, side="right")), local.size - 1)
    while w[starts[c] + i] == 0:  # rounding ran past the chunk's last live token (chunk c has mass > 0)
        i -= 1
    return int(starts[c] + i)


class StopChecker:
    """Cuts streamed text at the first stop string. push() returns the text that is safe to show: it holds back
    any tail that could still grow into a stop string, and never returns the stop string itself. The match
    chosen is the one that completes first (ties: the longest), so the output does not depend on how the
    text is chunked. After a match, `stopped` is True, `matched` is the stop string, and push() returns ""."""

    def __init__(self, stop: Sequence[str]):
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be a string or a list of non-empty strings, got {stop!r}")
        self._stop = stop
        self._held = ""
        self.stopped = False
        self.matched: str | None = None

    def push(self, text: str) -> str:
        if self.stopped:
            return ""
        buf = self._held + text
        best = None  # (end, start, stop)
        for s in self._stop:
            i = buf.find(s)
            if i >= 0 and (best is None or (i + len(s), i) < best[:2]):
                best = (i + len(s), i, s)
        if best is not None:
            self.stopped, self.matched, self._held = True, best[2], ""
            return buf[: best[1]]
        hold = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(buf)), hold, -1):
                if buf.endswith(s[:n]):
                    hold = n
                    break
        self._held = buf[len(buf) - hold :]
        return buf[: len(buf) - hold]

    def flush(self) -> str:
        """At the end of generation: the held-back text (it never became a stop string)."""
        out, self._held = ("" if self.stopped else self._held), ""
        return out
