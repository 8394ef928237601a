"""Server metrics in Prometheus' text format (GET /metrics): tokens, requests, the KV pool, prefix-cache hits,
speculative drafts verified and accepted, cancellations, time to first token and per-token latency histograms.

    m = Metrics()
    m.started(); m.first_token(ttft_s); m.token(gap_s); m.finished(stats, cancelled=False)
    text = m.render(pools)     # pools: {model: {"running", "waiting", "blocks_used", "blocks_cached", "blocks"}}
"""

from __future__ import annotations

import bisect
import threading

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0

    def observe(self, x: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, x)] += 1
        self.total += x

    def lines(self, name: str, help_: str) -> list[str]:
        out = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
        acc = 0
        for b, c in zip(self.buckets, self.counts):
            acc += c
            out.append(f'{name}_bucket{{le="{b}"}} {acc}')
        acc += self.counts[-1]
        out += [f'{name}_bucket{{le="+Inf"}} {acc}', f"{name}_sum {self.total:.6f}", f"{name}_count {acc}"]
        return out


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.requests = 0
        self.cancelled = 0
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.cached_tokens = 0
        self.draft_proposed = 0
        self.draft_accepted = 0
        self.in_flight = 0
        self.ttft = _Histogram(TTFT_BUCKETS)
        self.token_gap = _Histogram(TOKEN_BUCKETS)

    def started(self) -> None:
        with self._lock:
            self.requests += 1
            self.in_flight += 1

    def first_token(self, seconds: float) -> None:
        with self._lock:
            self.ttft.observe(seconds)

    def token(self, gap: float) -> None:
        with self._lock:
            self.token_gap.observe(gap)

    def finished(self, stats, cancelled: bool) -> None:
        with self._lock:
            self.in_flight -= 1
            self.cancelled += int(cancelled)
            if stats is not None:
                self.prompt_tokens += stats.prompt_tokens
                self.generated_tokens += stats.completion_tokens
                self.cached_tokens += stats.cached_tokens
                self.draft_proposed += stats.draft_proposed
                self.draft_accepted += stats.draft_accepted

    def render(self, pools: dict[str, dict]) -> str:
        p = "localllm_"
        with self._lock:
            lines = []
            for name, value, help_ in (
                ("requests_total", self.requests, "requests received"),
                ("requests_cancelled_total", self.cancelled, "requests cancelled by their client"),
                ("prompt_tokens_total", self.prompt_tokens, "prompt tokens of finished requests"),
                ("generation_tokens_total", self.generated_tokens, "tokens generated"),
                ("prefix_cache_hit_tokens_total", self.cached_tokens, "prompt tokens reused from the prefix cache"),
                ("draft_tokens_total", self.draft_proposed, "speculative draft tokens verified"),
                ("draft_accepted_tokens_total", self.draft_accepted, "speculative draft tokens accepted"),
            ):
                lines += [f"# HELP {p}{name} {help_}", f"# TYPE {p}{name} counter", f"{p}{name} {value}"]
            lines += [f"# HELP {p}requests_in_flight requests being served", f"# TYPE {p}requests_in_flight gauge"]
            lines.append(f"{p}requests_in_flight {self.in_flight}")
            for key, help_ in (
                ("running", "sequences in the engine's running set"),
                ("waiting", "sequences waiting for a row or for blocks"),
                ("blocks", "KV blocks in the pool"),
                ("blocks_used", "KV blocks held by live sequences"),
                ("blocks_cached", "free KV blocks that still hold a cached prefix"),
            ):
                lines += [f"# HELP {p}{key} {help_}", f"# TYPE {p}{key} gauge"]
                lines += [f'{p}{key}{{model="{m}"}} {v[key]}' for m, v in pools.items()]
            lines += self.ttft.lines(f"{p}time_to_first_token_seconds", "submission to first token")
            lines += self.token_gap.lines(f"{p}time_per_output_token_seconds", "time between streamed tokens")
        return "\n".join(lines) + "\n"
