"""CLI subcommands: each module has register(subparsers) -> None, setting `func(args) -> int`."""
