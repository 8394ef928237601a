"""How sizes and parameter counts are printed, the same in `localllm list`, `show`, `rm`, pulls and the TUI.

format_size(491_400_064) -> "491.4 MB"       # decimal units, as disks and download pages count
format_params(494_032_768) -> "494M"         # "-" when unknown
"""

from __future__ import annotations


def format_size(n: float) -> str:
    """Decimal units, as disks and download pages count: 491400064 -> "491.4 MB"."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def format_params(n: int | None) -> str:
    """A parameter count as model cards write it: 135_000_000 -> "135M", 1_543_714_304 -> "1.5B"; "-" when unknown."""
    if not n:
        return "-"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit}" if n < 10 * div else f"{n / div:.0f}{unit}"
    return str(n)
