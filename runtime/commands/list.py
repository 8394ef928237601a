"""`localllm list`: the models in the store (or, with --catalog, the models that can be pulled by name).

Damaged entries (a manifest that cannot be trusted, files missing, resized or outside the model's directory)
follow the table, one line each: the name, what is wrong, and the command that repairs or removes it.
"""

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
    from ..hub.store import repair_command, repair_hint

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
    models, broken = store.scan()
    damaged = [(m.name, why, m.source) for m in models if (why := m.damage())]
    damaged += [(e.name, e.problem, e.source) for e in broken]
    damaged.sort()
    if args.json:
        items = [{**m.manifest(), "path": str(m.path), "size": m.size, "damaged": m.damage()} for m in models]
        items += [
            {"name": e.name, "dir": str(e.dir), "size": e.size, "damaged": e.problem, "source": e.source}
            for e in broken
        ]
        for i in items:
            i["repair"] = repair_command(i["name"], i["source"]) if i["damaged"] else None
        print(json.dumps(sorted(items, key=lambda i: i["name"]), indent=1))
        return 0
    if not models and not broken:
        print(f"no models in {store.models_dir}; pull one with `localllm pull NAME` (`localllm list --catalog`)")
        return 0
    intact = [m for m in models if not m.damage()]
    if intact:
        rows = [["NAME", "SIZE", "QUANT", "ARCH", "PARAMS", "PULLED"]]
        for m in intact:
            pulled = datetime.datetime.fromtimestamp(m.pulled_at).strftime("%Y-%m-%d %H:%M")
            rows.append(
                [
                    m.name,
                    format_size(m.size),
                    m.quant or "-",
                    m.architecture or "-",
                    format_params(m.parameters),
                    f"{format_age(m.pulled_at)} ({pulled})",
                ]
            )
        print(_table(rows))
    if intact and damaged:
        print()
    for name, why, source in damaged:
        print(f"{name} (damaged): {why}: {repair_hint(name, source)}")
    return 0
