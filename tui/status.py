"""The status bar: one line with the model, the last reply's speeds, the context meter and the KV cache type.

  bar = StatusBar(model="smollm2:135m", ctx_size=4096, kv_type="f16")
  bar.set_stats(stats)      # a finished reply's Stats: prompt_tps, decode_tps, prompt_tokens + completion_tokens,
                            # cached_tokens (the prompt's prefix reused from the last turn, shown when there is one),
                            # draft acceptance (draft_accepted / draft_proposed, shown when drafts were verified)
  bar.set_busy(True)        # "Esc stops" shown until set_busy(False)
  bar.reset()               # a new conversation: context back to 0
  bar.set_model("qwen2.5-coder:0.5b", 4096, "f16")   # another model: its name, context and KV type; reset()

smollm2:135m │ pp 205 tg 17.0 t/s │ ctx ▰▰▱▱▱▱▱▱ 41/4096 │ KV f16 │ F1 help
smollm2:135m │ pp 205 tg 17.0 t/s, 32 cached │ ctx ▰▰▱▱▱▱▱▱ 41/4096 │ KV f16 │ F1 help
smollm2:135m │ pp 205 tg 41.0 t/s, drafts 72% │ ctx ▰▰▱▱▱▱▱▱ 41/4096 │ KV f16 │ F1 help
"""

from __future__ import annotations

from textual.widgets import Static

METER = 8  # cells in the context meter


def _rate(x: float | None) -> str:
    if not x:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


class StatusBar(Static):
    def __init__(self, model: str, ctx_size: int, kv_type: str):
        super().__init__(markup=False)
        self.model = model
        self.ctx_size = max(int(ctx_size), 1)
        self.kv_type = kv_type
        self.prompt_tps: float | None = None
        self.decode_tps: float | None = None
        self.cached_tokens = 0
        self.draft_acceptance: float | None = None
        self.ctx_used = 0
        self.busy = False

    def on_mount(self) -> None:
        self._show()

    def set_stats(self, stats) -> None:
        self.prompt_tps = stats.prompt_tps
        self.decode_tps = stats.decode_tps
        self.cached_tokens = int(getattr(stats, "cached_tokens", 0) or 0)
        proposed = int(getattr(stats, "draft_proposed", 0) or 0)
        self.draft_acceptance = int(getattr(stats, "draft_accepted", 0) or 0) / proposed if proposed else None
        self.ctx_used = int(stats.prompt_tokens) + int(stats.completion_tokens)
        if getattr(stats, "ctx_size", 0):
            self.ctx_size = int(stats.ctx_size)
        self._show()

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._show()

    def set_model(self, model: str, ctx_size: int, kv_type: str) -> None:
        self.model, self.ctx_size, self.kv_type = model, max(int(ctx_size), 1), kv_type
        self.reset()

    def reset(self) -> None:
        self.prompt_tps = self.decode_tps = None
        self.cached_tokens = 0
        self.draft_acceptance = None
        self.ctx_used = 0
        self._show()

    def on_resize(self) -> None:
        self._show()

    def line(self, width: int = 80) -> str:
        """The bar as text, the model name shortened so that it fits in `width` cells."""
        used = min(self.ctx_used, self.ctx_size)
        filled = round(METER * used / self.ctx_size)
        meter = "▰" * filled + "▱" * (METER - filled)
        speeds = f"pp {_rate(self.prompt_tps)} tg {_rate(self.decode_tps)} t/s"
        if self.cached_tokens:
            speeds += f", {self.cached_tokens} cached"
        if self.draft_acceptance is not None:
            speeds += f", drafts {100 * self.draft_acceptance:.0f}%"
        ctx, kv = f"ctx {meter} {self.ctx_used}/{self.ctx_size}", f"KV {self.kv_type}"
        hint = "Esc stops" if self.busy else "F1 help"
        # the fullest layout that leaves the model name 8 cells: the key hint goes first
        for rest in ([speeds, ctx, kv, hint], [speeds, ctx, kv]):
            room = width - 1 - sum(len(part) + 3 for part in rest)
            if room >= 8:
                break
        room = max(room, 8)
        model = self.model if len(self.model) <= room else self.model[: room - 1] + "…"
        return " " + " │ ".join([model, *rest])

    def _show(self) -> None:
        width = self.size.width if self.is_mounted and self.size.width else 80
        self.update(self.line(width))
