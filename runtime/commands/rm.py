"""`localllm rm NAME...`: delete models from the store, damaged ones too (refused while a pull of the model runs)."""

from __future__ import annotations

import sys

from ..hub.units import format_size


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "rm",
        help="remove a model from the store",
        description="Delete models from the store (refused while a pull of the model runs).",
    )
    p.add_argument(
        "names", nargs="+", metavar="NAME", help="store name (as `localllm list` shows it, damaged or not) or alias"
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from ..hub import DamagedEntry, Store, StoreError

    store = Store()
    status = 0
    for name in args.names:
        try:
            m = store.remove(name)
        except (StoreError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            status = 1
            continue
        damaged = ", damaged" if isinstance(m, DamagedEntry) else ""
        print(f"deleted {m.name} ({format_size(m.size)}{damaged})")
    return status
