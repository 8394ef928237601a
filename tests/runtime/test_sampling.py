"""Sampling chain against a full-sort numpy reference, RNG discipline, parameter validation, stop strings."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from localllm.sampling import Sampler, SamplingParams, StopChecker

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
V_BIG = 152064  # Qwen2's vocabulary: long rows take the subsampled top-k / top-p paths


def flat_row(n: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * 2.5).astype(np.float32)


def peaked_row(n: int, seed: int) -> np.ndarray:
    """A model-like row: a N(0, 2) bulk and a few tokens far above it."""
    rng = np.random.default_rng(seed)
    row = (rng.standard_normal(n) * 2).astype(np.float32)
    hot = rng.choice(n, min(12, n // 2), replace=False)
    row[hot] += rng.uniform(6, 14, hot.size).astype(np.float32)
    return row


def ref_distribution(row: np.ndarray, p: SamplingParams, history=()) -> np.ndarray:
    """[n_vocab] float64 probabilities, written out the obvious way: Python-loop penalties, a full stable sort."""
    logits = row.astype(np.float32).copy()
    n = p.penalty_last_n
    window = list(history) if n == -1 else list(history)[-n:] if n > 0 else []
    for t in set(window):
        x = float(logits[t])
        x = x * p.repetition_penalty if x <= 0 else x / p.repetition_penalty
        logits[t] = x - (window.count(t) * p.frequency_penalty + p.presence_penalty)
    l64 = logits.astype(np.float64)
    out = np.zeros(row.size)
    if p.temperature == 0:
        out[int(np.argmax(logits))] = 1.0
        return out
    keep = np.argsort(-l64, kind="stable")
    if p.top_k > 0:
        keep = keep[: p.top_k]
    if p.top_p < 1:
        pr = np.exp(l64[keep] - l64[keep].max())
        cum = np.cumsum(pr / pr.sum())
        reached = cum >= p.top_p
        keep = keep[: int(np.argmax(reached)) + 1 if reached.any() else keep.size]
    if p.min_p > 0:
        pr = np.exp(l64[keep] - l64[keep].max())
        keep = keep[pr >= p.min_p]
    z = np.exp((l64[keep] - l64[keep].max()) / p.temperature)
    out[keep] = z / z.sum()
    return out


def dense(sampler: Sampler, row: np.ndarray, history=()) -> np.ndarray:
    ids, probs = sampler.distribution(row, history)
    assert ids.dtype == np.int64 and np.all(probs > 0) and abs(probs.sum() - 1) < 1e-9
    assert np.unique(ids).size == ids.size
    out = np.zeros(row.size)
    out[ids] = probs
    return out


def assert_same_distribution(row, params, history=()):
    got = dense(Sampler(params), row, history)
    want = ref_distribution(row, params, history)
    assert set(np.flatnonzero(got)) == set(np.flatnonzero(want)), params
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-12)


# ---- greedy ----


def test_greedy_is_argmax_and_draws_nothing():
    row = flat_row(1000, 0)
    s = Sampler(SamplingParams(temperature=0, top_k=5, top_p=0.5, seed=3))
    state = s._rng.bit_generator.state
    assert s.sample(row) == int(np.argmax(row))
    assert s._rng.bit_generator.state == state
    ids, probs = s.distribution(row)
    assert ids.tolist() == [int(np.argmax(row))] and probs.tolist() == [1.0]


def test_greedy_ties_take_the_lowest_id_and_see_penalties():
    row = np.zeros(10, dtype=np.float32)
    row[[3, 7]] = 5.0
    assert Sampler(SamplingParams(temperature=0)).sample(row) == 3
    s = Sampler(SamplingParams(temperature=0, repetition_penalty=1.5))
    assert s.sample(row, history=[1, 3]) == 7


def test_top_k_one_is_greedy_under_sampling():
    row = flat_row(V_BIG, 1)
    s = Sampler(SamplingParams(top_k=1, seed=0))
    assert {s.sample(row) for _ in range(20)} == {int(np.argmax(row))}


# ---- each processor and the whole chain against the reference ----


@pytest.mark.parametrize("n", [7, 1000, V_BIG])
@pytest.mark.parametrize("k", [1, 2, 40, 500, 5000])
def test_top_k(n, k):
    for row in (flat_row(n, k), peaked_row(n, k)):
        assert_same_distribution(row, SamplingParams(top_k=k))


@pytest.mark.parametrize("n", [7, 1000, V_BIG])
@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.95, 0.999])
def test_top_p(n, top_p):
    for seed in range(2):
        assert_same_distribution(flat_row(n, seed), SamplingParams(top_p=top_p))
        assert_same_distribution(peaked_row(n, seed), SamplingParams(top_p=top_p))


@pytest.mark.parametrize("n", [7, 1000, V_BIG])
@pytest.mark.parametrize("min_p", [0.001, 0.05, 0.3, 1.0])
def test_min_p(n, min_p):
    assert_same_distribution(flat_row(n, 5), SamplingParams(min_p=min_p))
    assert_same_distribution(peaked_row(n, 5), SamplingParams(min_p=min_p))


@pytest.mark.parametrize("temperature", [0.01, 0.5, 1.0, 2.0, 100.0])
def test_temperature(temperature):
    for n in (7, 1000, V_BIG):
        assert_same_distribution(peaked_row(n, 2), SamplingParams(temperature=temperature))


@pytest.mark.parametrize("offset", [0, 1])
def test_rows_that_fool_the_subsample(offset):
    """The strided subsample sees only every 37th token of a 152064 row: put (or hide) the heavy tokens there."""
    for boost in (3.0, 12.0):
        row = flat_row(V_BIG, 8)
        row[offset::37] += boost
        for kw in (dict(top_k=40), dict(top_k=3000), dict(top_p=0.5), dict(top_p=0.95), dict(top_p=0.999)):
            assert_same_distribution(row, SamplingParams(**kw))


@pytest.mark.filterwarnings("error")
def test_extreme_temperatures_stay_finite():
    row = peaked_row(V_BIG, 3)
    row[:100] = -np.inf
    best = int(np.argmax(row))
    for t in (1e-30, 1e-300, 5e-324):
        for kw in (dict(), dict(top_k=20)):
            s = Sampler(SamplingParams(temperature=t, seed=0, **kw))
            assert s.sample(row) == best and s.distribution(row)[0].tolist() == [best]
    _, probs = Sampler(SamplingParams(temperature=1e300, top_k=10)).distribution(row)
    np.testing.assert_allclose(probs, 0.1)
    assert 100 <= Sampler(SamplingParams(temperature=1e300, seed=0)).sample(row) < V_BIG


@pytest.mark.parametrize(
    "kw",
    [
        dict(repetition_penalty=1.3),
        dict(repetition_penalty=0.7),
        dict(presence_penalty=1.5),
        dict(frequency_penalty=-0.5, penalty_last_n=-1),
        dict(repetition_penalty=1.1, presence_penalty=0.3, frequency_penalty=0.4, penalty_last_n=16),
        dict(repetition_penalty=2.0, penalty_last_n=0),
    ],
)
def test_penalties(kw):
    row = flat_row(1000, 9)
    history = np.random.default_rng(1).integers(0, 60, 200).tolist()  # repeats, and logits of both signs
    assert_same_distribution(row, SamplingParams(**kw), history)
    assert_same_distribution(row, SamplingParams(temperature=0, **kw), history)


@pytest.mark.parametrize(
    "kw",
    [
        dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1),  # llama.cpp's CLI
        dict(temperature=0.7, top_p=0.8),
        dict(temperature=1.3, top_k=100, min_p=0.1),
        dict(temperature=0.6, top_p=0.9, min_p=0.02, presence_penalty=0.5, frequency_penalty=0.2),
    ],
)
def test_whole_chain(kw):
    history = np.random.default_rng(2).integers(0, V_BIG, 300).tolist()
    for seed in range(2):
        for row in (flat_row(V_BIG, seed), peaked_row(V_BIG, seed)):
            row[history[-5:]] += 8  # recent tokens near the top, so the penalties move the cut
            assert_same_distribution(row, SamplingParams(**kw), history)


def test_ties_and_masked_tokens():
    row = np.zeros(V_BIG, dtype=np.float32)  # every token tied: ranked by id
    assert_same_distribution(row, SamplingParams(top_p=0.3))
    assert_same_distribution(row, SamplingParams(top_k=50))
    row = np.full(5000, -np.inf, dtype=np.float32)
    row[[10, 4000, 4001]] = [1.0, 2.0, 2.0]
    for kw in (dict(), dict(top_k=2), dict(top_p=0.6), dict(min_p=0.5), dict(temperature=0.5)):
        assert_same_distribution(row, SamplingParams(**kw))
        assert Sampler(SamplingParams(seed=1, **kw)).sample(row) in (10, 4000, 4001)


def test_logits_are_not_modified_and_dtypes_are_accepted():
    row = flat_row(2000, 3)
    before = row.copy()
    history = list(range(50))
    s = Sampler(SamplingParams(temperature=0.7, top_k=30, top_p=0.9, min_p=0.01, repetition_penalty=1.2, seed=1))
    s.sample(row, history)
    s.distribution(row, history)
    np.testing.assert_array_equal(row, before)
    a = Sampler(SamplingParams(seed=4, top_k=20)).sample(row.astype(np.float64), history)
    b = Sampler(SamplingParams(seed=4, top_k=20)).sample(row, history)
    assert a == b


# ---- randomness ----


def draws(sampler: Sampler, rows, history=()) -> list[int]:
    return [sampler.sample(r, history) for r in rows]


@pytest.mark.parametrize("kw", [dict(), dict(temperature=0.8, top_k=40, top_p=0.95), dict(top_p=0.9), dict(min_p=0.01)])
def test_same_seed_same_tokens(kw):
    rows = [flat_row(V_BIG, i) for i in range(4)] * 8
    a = draws(Sampler(SamplingParams(seed=1234, **kw)), rows)
    b = draws(Sampler(SamplingParams(seed=1234, **kw)), rows)
    c = draws(Sampler(SamplingParams(seed=1235, **kw)), rows)
    assert a == b
    assert a != c


def test_requests_do_not_share_rng_state():
    rows = [peaked_row(3000, i) for i in range(40)]
    pa, pb = SamplingParams(seed=7, temperature=1.5), SamplingParams(seed=8, top_k=50, temperature=2.0)
    alone_a, alone_b = draws(Sampler(pa), rows), draws(Sampler(pb), rows)
    a, b = Sampler(pa), Sampler(pb)
    together = [(a.sample(r), b.sample(r)) for r in rows]  # interleaved as in one batched engine step
    assert [x for x, _ in together] == alone_a
    assert [y for _, y in together] == alone_b
    twins = Sampler(pa), Sampler(pa)  # same seed, separate generators
    assert draws(twins[0], rows[:10]) == draws(twins[1], rows[:10])


def test_unseeded_samplers_differ():
    row = np.zeros(1000, dtype=np.float32)
    assert draws(Sampler(SamplingParams()), [row] * 20) != draws(Sampler(SamplingParams()), [row] * 20)


def check_frequencies(sampler: Sampler, row: np.ndarray, n_draws: int, groups):
    """groups: lists of token ids; the empirical frequency of each group must match its probability."""
    probs = dense(sampler, row)
    counts = np.bincount([sampler.sample(row) for _ in range(n_draws)], minlength=row.size)
    assert counts[probs == 0].sum() == 0
    for g in groups:
        p, f = probs[g].sum(), counts[g].sum() / n_draws
        assert abs(f - p) <= 4.5 * math.sqrt(p * (1 - p) / n_draws) + 1e-3, (g, p, f)


def test_temperature_frequencies():
    row = np.log(np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02], dtype=np.float32))
    s = Sampler(SamplingParams(temperature=0.7, seed=11))
    check_frequencies(s, row, 4000, [[i] for i in range(row.size)])


def test_truncated_frequencies():
    row = np.log(np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02], dtype=np.float32))
    s = Sampler(SamplingParams(temperature=1.2, top_k=5, top_p=0.9, seed=12))
    check_frequencies(s, row, 4000, [[i] for i in range(row.size)])


def test_whole_row_draw_frequencies():
    row = peaked_row(20000, 4)  # no truncation: the chunked inverse-CDF draw over the whole row
    s = Sampler(SamplingParams(seed=13))
    top = np.argsort(-row)[:6]
    rest = np.setdiff1d(np.arange(row.size), top)
    check_frequencies(s, row, 3000, [[t] for t in top] + [rest, rest[: rest.size // 2]])


# ---- parameter validation ----


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", -0.1),
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("temperature", "hot"),
        ("temperature", None),
        ("top_k", -1),
        ("top_k", 2.5),
        ("top_k", True),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", -0.2),
        ("min_p", -0.01),
        ("min_p", 1.01),
        ("repetition_penalty", 0.0),
        ("repetition_penalty", -1.0),
        ("repetition_penalty", math.inf),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3),
        ("penalty_last_n", -2),
        ("penalty_last_n", 1.0),
        ("seed", -1),
        ("seed", 1.5),
        ("seed", "42"),
        ("max_tokens", -5),
        ("max_tokens", 3.0),
        ("stop", [""]),
        ("stop", ["ok", 3]),
        ("stop", 7),
        ("stop", {"a": 1}),
        ("ignore_eos", 1),
        ("ignore_eos", "yes"),
    ],
)
def test_invalid_parameter_names_itself(field, value):
    with pytest.raises(ValueError, match=rf"^{field} must be"):
        SamplingParams(**{field: value})


def test_error_message_shows_range_and_value():
    with pytest.raises(ValueError, match=r"^top_p must be in \(0, 1\], got 1\.5$"):
        SamplingParams(top_p=1.5)


def test_valid_parameters_are_normalised_and_frozen():
    p = SamplingParams(temperature=1, top_k=np.int64(5), stop="###", seed=0, max_tokens=16)
    assert p.temperature == 1.0 and isinstance(p.temperature, float)
    assert p.top_k == 5 and type(p.top_k) is int
    assert p.stop == ("###",)
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")
    assert SamplingParams(temperature=0).greedy
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.top_k = 3
    assert hash(p) == hash(SamplingParams(temperature=1, top_k=5, stop=("###",), seed=0, max_tokens=16))


def test_bad_sampler_inputs():
    s = Sampler(SamplingParams(repetition_penalty=1.2))
    with pytest.raises(ValueError, match="logits"):
        s.sample(np.zeros((2, 5), dtype=np.float32))
    with pytest.raises(ValueError, match="history"):
        s.sample(np.zeros(5, dtype=np.float32), history=[1, 5])
    with pytest.raises(ValueError, match="finite"):
        Sampler(SamplingParams()).sample(np.full(5, -np.inf, dtype=np.float32))
    with pytest.raises(ValueError, match="params"):
        Sampler({"temperature": 0.5})


# ---- stop strings ----


def stream(stop, chunks) -> tuple[str, StopChecker]:
    sc = StopChecker(stop)
    out = "".join(sc.push(c) for c in chunks) + sc.flush()
    return out, sc


def test_stop_split_across_chunks():
    sc = StopChecker(["</answer>", "\n\nUser:"])
    assert sc.push("The result is 4<") == "The result is 4"
    assert sc.push("/ans") == ""
    assert sc.push("wer> and more") == ""
    assert sc.stopped and sc.matched == "</answer>"
    assert sc.push("ignored") == "" and sc.flush() == ""


def test_stop_held_text_released_when_it_diverges():
    sc = StopChecker(["STOP"])
    assert sc.push("a ST") == "a "
    assert sc.push("O") == ""
    assert sc.push("P!") == "" and sc.stopped
    sc = StopChecker(["STOP"])
    assert sc.push("a ST") == "a "
    assert sc.push("OOL") == "STOOL"
    assert sc.push("S") == ""
    assert sc.flush() == "S" and not sc.stopped


def test_stop_first_completed_match_wins():
    assert stream(["abc", "b"], ["abc"])[0] == "a"
    assert stream(["abc", "b"], ["a", "b", "c"])[0] == "a"
    out, sc = stream(["ab", "b"], ["xab"])
    assert out == "x" and sc.matched == "ab"  # same end: the longer (earlier) match
    assert stream("\n", ["line one\nline two"])[0] == "line one"
    assert stream([], ["no stops"])[0] == "no stops"
    with pytest.raises(ValueError, match="^stop must"):
        StopChecker(["ok", ""])


def expected_cut(text: str, stops) -> str:
    best = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or (i + len(s), i) < best):
            best = (i + len(s), i)
    return text if best is None else text[: best[1]]


@SETTINGS
@given(
    text=st.text(alphabet="ab\nc", max_size=40),
    stops=st.lists(st.text(alphabet="ab\n", min_size=1, max_size=4), max_size=3),
    cuts=st.lists(st.integers(0, 40), max_size=12),
)
def test_stop_output_does_not_depend_on_chunking(text, stops, cuts):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    chunks = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    sc = StopChecker(stops)
    shown = ""
    for c in chunks:
        shown += sc.push(c)
        assert expected_cut(text, stops).startswith(shown)  # never shows text past the cut
    shown += sc.flush()
    assert shown == expected_cut(text, stops)
    assert sc.stopped == (shown != text or any(s in text for s in stops))


# ---- speed (reported; only a loose bound is asserted) ----


def test_speed_report(capsys):
    history = np.random.default_rng(0).integers(0, V_BIG, 500).tolist()
    cases = {
        "greedy": (SamplingParams(temperature=0), ()),
        "temperature only": (SamplingParams(temperature=0.8, seed=1), ()),
        "top_k=40 top_p=0.95": (SamplingParams(temperature=0.8, top_k=40, top_p=0.95, seed=1), ()),
        "llama.cpp CLI chain": (
            SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1, seed=1),
            history,
        ),
        "top_p=0.95 only": (SamplingParams(top_p=0.95, seed=1), ()),
    }
    lines, medians = [], {}
    for kind, make in (("model-like", peaked_row), ("flat N(0,2.5)", flat_row)):
        rows = [make(V_BIG, i) for i in range(4)]
        for name, (params, hist) in cases.items():
            s = Sampler(params)
            times = []
            for i in range(60):
                t0 = time.perf_counter()
                s.sample(rows[i % 4], hist)
                times.append(time.perf_counter() - t0)
            medians[kind, name] = med = float(np.median(times)) * 1e6
            lines.append(f"  {kind:14s} {name:22s} median {med:7.0f} us   p90 {np.percentile(times, 90) * 1e6:7.0f} us")
    with capsys.disabled():
        print(f"\nsampling one {V_BIG}-token row:\n" + "\n".join(lines))
    assert medians["model-like", "top_k=40 top_p=0.95"] < 5000  # ~0.1-0.2 ms here; loose for a busy machine


# -- candidates (localllm.model.candidates): each row's top K computed natively, sampled as the whole row ---------------


def _tied_row(rng: np.random.Generator, n: int) -> np.ndarray:
    """Logits on a coarse grid (many exact ties, the boundary of any top-k among them), a few -inf, -0.0 and +0.0."""
    row = (np.round(rng.standard_normal(n) * 4) / 4).astype(np.float32)
    row[rng.integers(0, n, 20)] = -np.inf
    row[rng.integers(0, n, 5)] = -0.0
    return row


@pytest.mark.parametrize("n,k", [(1000, 1), (1000, 40), (151936, 40), (300, 256), (256, 256)])
def test_native_top_k_is_largest(n, k):
    from localllm.native import testing
    from localllm.sampling import _largest

    rng = np.random.default_rng(n + k)
    rows = np.stack([_tied_row(rng, n), rng.standard_normal(n).astype(np.float32)])
    ids, vals = testing.top_k(rows, n, k)
    for r in range(2):
        want = _largest(rows[r], k)
        np.testing.assert_array_equal(ids[r], want)
        np.testing.assert_array_equal(vals[r], rows[r][want])


def test_native_top_k_leaves_out_the_padding_and_ranks_nan_first():
    from localllm.native import testing

    row = np.array([[1.0, 5.0, np.nan, 2.0, 9.0, 9.0]], dtype=np.float32)
    ids, vals = testing.top_k(row, 4, 3)  # columns 4 and 5 are padding
    assert ids.tolist() == [[2, 1, 3]] and np.isnan(vals[0, 0])
    with pytest.raises(ValueError, match="k <= min"):
        testing.top_k(row, 4, 5)


@pytest.mark.parametrize(
    "kw",
    [
        dict(temperature=0),
        dict(top_k=40),
        dict(top_k=40, top_p=0.5, min_p=0.1, temperature=2.0),
        dict(top_k=256, top_p=0.99, min_p=0.0, temperature=0.3),
        dict(top_k=3, top_p=1.0, min_p=0.0),
    ],
)
def test_candidate_rows_sample_what_whole_rows_sample(kw):
    from localllm.model.candidates import CandidateRow
    from localllm.native import testing

    params = SamplingParams(seed=11, **kw)
    a, b = Sampler(params), Sampler(params)
    k = a.candidates_needed()
    assert k == (1 if kw.get("temperature") == 0 else kw["top_k"])
    rng = np.random.default_rng(0)
    for i in range(60):
        row = _tied_row(rng, 5000) if i % 2 else rng.standard_normal(5000).astype(np.float32) * 3
        ids, vals = testing.top_k(row[None, :], row.size, max(k, 40))
        cand = CandidateRow(ids[0], vals[0])
        assert a.sample(cand) == b.sample(row)
        for x, y in zip(a.distribution(cand), b.distribution(row)):
            np.testing.assert_array_equal(x, y)


def test_samplers_that_need_whole_rows_say_so():
    assert Sampler(SamplingParams(top_k=0, top_p=0.9)).candidates_needed() is None
    assert Sampler(SamplingParams(top_k=40, repetition_penalty=1.2)).candidates_needed() is None
    assert Sampler(SamplingParams(temperature=0, presence_penalty=0.5)).candidates_needed() is None


def test_logit_bias_is_validated_and_added_before_the_chain():
    from localllm.sampling import Sampler, SamplingParams

    with pytest.raises(ValueError, match=r"logit_bias\[3\] must be in \[-100, 100\]"):
        SamplingParams(logit_bias={3: 101})
    with pytest.raises(ValueError, match="logit_bias token id must be >= 0"):
        SamplingParams(logit_bias={-1: 1.0})
    p = SamplingParams(temperature=0, logit_bias={2: 5.0, 0: -1.0})
    assert p.logit_bias == ((0, -1.0), (2, 5.0))
    row = np.array([1.0, 3.0, 0.0, 2.5], dtype=np.float32)
    s = Sampler(p)
    assert s.candidates_needed() is None  # the bias reads any token's logit
    assert s.sample(row) == 2 and row[2] == 0.0  # 0 + 5 beats 3; the caller's row is left as it was
    with pytest.raises(ValueError, match="outside the vocabulary"):
        Sampler(SamplingParams(logit_bias={9: 1.0})).sample(row)
