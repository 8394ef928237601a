"""`localllm list`: the models in the store (or, with --catalog, the models that can be pulled by name)."""

from __future__ import annotations

import datetime
import json
import time

from ..hub.units import format_params, format_size


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "list",
        help="list the models in the store",
        description="List the models in the store, or with --catalog the models `localllm pull` knows by name.",
    )
    p.add_argument("--catalog", action="store_true", help="list the catalog: names `localllm pull` knows")
    p.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    p.set_defaults(func=run)


def format_age(t: float, now: float | None = None) -> str:
    s = max(0, (now if now is not None else time.time()) - t)
    for div, unit in ((86400 * 30, "month"), (86400 * 7, "week"), (86400, "day"), (3600, "hour"), (60, "minute")):
        if s >= div:
            n = int(s // div)
            return f"{n} {unit}{'s' if n > 1 else ''} ago"
    return "just now"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def run(args) -> int:
    from ..hub import Store
    from ..hub.catalog import load

    store = Store()
    if args.catalog:
        cat = load()
        stored = {m.name for m in store.models()}
        items = [
            {
                "name": e.name,
                "size": e.size,
                "file": e.file,
                "stored": e.name in stored,
                "default": e.name == cat.default,
                "description": e.description,
            }
            for e in cat.entries.values()
        ]
        if args.json:
            print(json.dumps(items, indent=1))
            return 0
        rows = [["NAME", "SIZE", "STORED", "DESCRIPTION"]]
        rows += [[i["name"], format_size(i["size"]), "yes" if i["stored"] else "-", i["description"]] for i in items]
        print(_table(rows))
        return 0
    models = store.models()
    if args.json:
        print(
            json.dumps(
                [{**m.manifest(), "path": str(m.path), "size": m.size, "damaged": m.damage()} for m in models], indent=1
            )
        )
        return 0
    if not models:
        print(f"no models in {store.models_dir}; pull one with `localllm pull NAME` (`localllm list --catalog`)")
        return 0
    rows = [["NAME", "SIZE", "QUANT", "ARCH", "PARAMS", "PULLED"]]
    for m in models:
        pulled = datetime.datetime.fromtimestamp(m.pulled_at).strftime("%Y-%m-%d %H:%M")
        rows.append(
            [
                m.name + (" (damaged)" if m.damage() else ""),
                format_size(m.size),
                m.quant or "-",
                m.architecture or "-",
                format_params(m.parameters),
                f"{format_age(m.pulled_at)} ({pulled})",
            ]
        )
    print(_table(rows))
    return 0
