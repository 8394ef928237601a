"""The model picker: the models in the store (what `localllm list` shows), one to chat with.

    app.push_screen(ModelPicker(Store().models(), current="smollm2:135m"), callback)
    # callback(StoredModel) on Enter (or a click) over a model, None on Esc

An empty store shows how to get a model instead: `localllm pull NAME`, with the catalog's default as the example.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ..hub.catalog import CatalogError
from ..hub.catalog import load as load_catalog
from ..hub.store import StoredModel
from ..hub.units import format_size


def empty_store_message() -> str:
    try:
        example = f"localllm pull {load_catalog().default}"
    except CatalogError:
        example = "localllm pull NAME"
    return (
        f"No models in the store yet. Pull one in a shell:\n\n    {example}\n\n"
        "`localllm list --catalog` lists the names you can pull; a pulled model shows up here (Ctrl+O)."
    )


def describe(model: StoredModel, current: str) -> str:
    mark = "●" if model.name == current else " "
    damaged = " (damaged)" if model.damage() else ""
    return f"{mark} {model.name}{damaged}  {format_size(model.size)}  {model.quant or ''}".rstrip()


class ModelPicker(ModalScreen[StoredModel | None]):
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "dismiss(None)", "close")]

    def __init__(self, models: list[StoredModel], current: str):
        super().__init__()
        self.models = models
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="picker"):
            yield Static("Models in the store", id="picker-title")
            if self.models:
                options = OptionList(*[Option(Text(describe(m, self.current))) for m in self.models])
                names = [m.name for m in self.models]
                if self.current in names:
                    options.highlighted = names.index(self.current)
                yield options
                yield Static("Enter switches to the highlighted model, Esc closes", id="picker-foot")
            else:
                yield Static(empty_store_message(), id="picker-empty", markup=False)
                yield Static("Esc closes", id="picker-foot")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.models[event.option_index])
