"""The chat application: conversation view, message input and status bar over a ReplyWorker.

    app = ChatApp(ReplyWorker(llm, "smollm2:135m"), system="Be brief.", temperature=0.8, top_p=0.95, max_tokens=None,
                  saved=History(path), store=Store(), load_model=lambda path: LLM(path, ctx_size=4096))
    app.run()

One reply at a time: the reply worker's thread streams it, the app is woken (ReplyUpdated) and takes all the
text that arrived since the last wake. The conversation sent to the model is self.history
([{"role", "content"}], without the system message); a reply stopped with Esc keeps its text in it, a turn the
engine refused (an error) is shown but left out of it. F4 loads the last message back into the input; sending it
replaces that turn and everything after it. With a History, each finished turn (user message and reply, a
stopped reply included) is saved with the conversation's settings (Ctrl+S: system prompt, temperature, top-p,
max tokens; a new conversation starts from the constructor's), and the side panel (Ctrl+B) lists, resumes,
renames and deletes conversations. Ctrl+R asks again: a new reply in place of the last one, or after an error
the refused message resent. Ctrl+O picks another model from the store: load_model(path) opens it on a
worker thread, the reply worker swaps to it once loaded, and a failed load is an error line (the old model stays).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message

from ..hub.store import Store, StoredModel
from . import chat_input, sidebar
from .chat_input import ChatInput
from .conversation import AssistantMessage, Conversation, UserMessage
from .help import HelpScreen
from .history import History, title_for
from .model_picker import ModelPicker
from .rename import RenameScreen
from .reply_worker import End, Reply, ReplyWorker
from .settings import Settings, SettingsScreen
from .sidebar import Sidebar
from .status import StatusBar


class ReplyUpdated(Message):
    """Posted from the reply worker's thread: `reply` has text or its end waiting in take()."""

    def __init__(self, reply: Reply):
        super().__init__()
        self.reply = reply


class ModelLoaded(Message):
    """Posted from the loading worker: `name` is the reply worker's model now, or `error` says why it is not."""

    def __init__(self, name: str, error: str | None = None):
        super().__init__()
        self.name = name
        self.error = error


def open_llm(path: Path):
    from ..llm import LLM

    return LLM(path)


class ChatApp(App):
    CSS_PATH = "chat.tcss"
    TITLE = "localllm chat"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "stop", "stop the reply (keeps the text so far)", key_display="Esc"),
        Binding("f1", "help", "this help screen", key_display="F1"),
        Binding("question_mark", "help", "this help screen (input not focused)", key_display="?"),
        Binding("f2", "toggle_raw", "replies as Markdown / raw text", key_display="F2"),
        Binding("ctrl+n", "new", "new conversation", key_display="Ctrl+N"),
        Binding("ctrl+b", "toggle_sidebar", "show / hide the saved conversations", key_display="Ctrl+B"),
        Binding("ctrl+r", "regenerate", "regenerate the last reply (or a failed one)", key_display="Ctrl+R"),
        Binding("f4", "edit_last", "edit and resend your last message", key_display="F4"),
        Binding("ctrl+s", "settings", "system prompt and sampling settings", key_display="Ctrl+S"),
        Binding("ctrl+o", "pick_model", "pick a model from the store", key_display="Ctrl+O"),
        Binding("f3", "copy", "copy the last reply to the clipboard", key_display="F3"),
        Binding("ctrl+t", "toggle_theme", "light / dark theme", key_display="Ctrl+T"),
        Binding("pageup", "scroll_up", "scroll the conversation up", key_display="PgUp", priority=True),
        Binding("pagedown", "scroll_down", "scroll the conversation down", key_display="PgDn", priority=True),
        Binding("ctrl+q", "quit", "quit", key_display="Ctrl+Q", priority=True),
    ]

    def __init__(
        self,
        worker: ReplyWorker,
        system: str | None = None,
        temperature: float = 0.8,
        top_p: float = 0.95,
        max_tokens: int | None = None,
        saved: History | None = None,
        store: Store | None = None,
        load_model: Callable[[Path], Any] = open_llm,
    ):
        super().__init__()
        self.worker = worker
        self.saved = saved  # where conversations are kept; None: nothing is saved and there is no side panel
        self.store = store if store is not None else Store()
        self.load_model = load_model
        self.conversation_id: int | None = None  # the saved conversation on screen
        self.default_settings = Settings(system, temperature, top_p, max_tokens)  # a new conversation's
        self.settings = self.default_settings  # the conversation on screen's
        self.history: list[dict] = []
        self.raw = False
        self.reply: Reply | None = None  # the reply in progress
        self.reply_view: AssistantMessage | None = None
        self.editing: UserMessage | None = None  # the message F4 took back into the input
        self.loading: str | None = None  # the model being loaded

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield Sidebar(id="sidebar")
            with Vertical(id="chat"):
                yield Conversation(id="conversation")
                yield ChatInput(id="input")
        yield StatusBar(self.worker.model_name, self.worker.ctx_size, self.worker.kv_type)

    async def on_mount(self) -> None:
        panel = self.query_one(Sidebar)
        panel.display = self.saved is not None and self.size.width >= 100
        await self.refresh_sidebar()
        self.query_one(ChatInput).focus()

    async def refresh_sidebar(self) -> None:
        if self.saved is not None:
            await self.query_one(Sidebar).show(self.saved.list(), self.conversation_id)

    @property
    def conversation(self) -> Conversation:
        return self.query_one(Conversation)

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    def help_rows(self) -> list[tuple[str, str]]:
        rows = list(chat_input.KEYS) + list(sidebar.KEYS)
        for b in [*Sidebar.BINDINGS, *self.BINDINGS]:
            rows.append((b.key_display or b.key, b.description))
        rows.append(("Tab, Shift+Tab", "move between the input and the conversation"))
        rows.append(("Up, Down", "scroll the conversation (when it is focused)"))
        return rows

    def messages(self) -> list[dict]:
        """What the model is sent: the system message (if any), then the conversation."""
        system = self.settings.system
        head = [{"role": "system", "content": system}] if system else []
        return head + [dict(m) for m in self.history]

    def busy(self) -> str | None:
        """Why the model cannot take a request now (a reply in progress, a model loading), or None."""
        if self.reply is not None:
            return "A reply is in progress: Esc stops it."
        if self.loading is not None:
            return f"Loading {self.loading}: one moment."
        return None

    # -- sending and streaming ------------------------------------------------------------------------
    def on_chat_input_submitted(self, event: ChatInput.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        if why := self.busy():
            self.notify(why, severity="warning")
            return
        self.query_one(ChatInput).clear()
        if self.editing is not None:
            self._drop_from(self.editing)
        self.send(text)

    def send(self, text: str) -> None:
        self.conversation.add_user(text, turn=len(self.history))
        self.history.append({"role": "user", "content": text})
        self._start_reply()

    def _drop_from(self, message: UserMessage) -> None:
        """Removes `message` and everything after it, from the screen, the conversation and the saved copy."""
        keep = message.turn if message.turn is not None else len(self.history)
        self.history = self.history[:keep]
        if self.saved is not None and self.conversation_id is not None:
            self.saved.truncate(self.conversation_id, keep)
        self.conversation.drop_from(message)
        self._end_edit()

    def _end_edit(self) -> None:
        self.editing = None
        self.query_one(ChatInput).border_title = None

    def _start_reply(self) -> None:
        """Streams a reply to self.history (which ends with the user's message) into a new message view."""
        self.reply_view = self.conversation.add_assistant(raw=self.raw)
        self.reply = self.worker.start(self.messages(), notify=self._wake, **self.settings.sampling())
        self.status.set_busy(True)

    def _wake(self, reply: Reply) -> None:
        """The reply worker's thread: `reply` has something to take."""
        self.post_message(ReplyUpdated(reply))

    def on_reply_updated(self, message: ReplyUpdated) -> None:
        if message.reply is self.reply:
            self._drain()

    def _drain(self) -> None:
        reply, view = self.reply, self.reply_view
        if reply is None or view is None:
            return
        view.append_reasoning(reply.take_reasoning())
        text, end = reply.take()
        view.append(text)
        if end is not None:
            self._finish(end)

    def _finish(self, end: End) -> None:
        view, conv = self.reply_view, self.conversation
        self.reply = self.reply_view = None
        self.status.set_busy(False)
        if end.stats is not None:
            self.status.set_stats(end.stats)
        if end.finish_reason == "error":
            if view is not None and not view.text:
                view.remove()
            self.history.pop()  # the refused user turn stays on screen, not in what the model is sent
            conv.query(UserMessage).last().turn = None
            conv.add_error(end.error or "the engine failed")
            return
        self.history.append({"role": "assistant", "content": view.text if view is not None else ""})
        self._save(self.history[-2:])
        if end.finish_reason == "stopped":
            conv.add_note("stopped")
        elif end.finish_reason == "length":
            full = self._context_full(end.stats)
            conv.add_note("context full: Ctrl+N starts a new conversation" if full else "max tokens reached")

    def _context_full(self, stats) -> bool:
        """Whether a "length" reply ended on a full context rather than on max tokens: the engine's
        stats.context_full, or for stats without it, prompt + completion tokens reaching the context size."""
        if stats is None:
            return False
        full = getattr(stats, "context_full", None)
        if full is not None:
            return bool(full)
        return stats.prompt_tokens + stats.completion_tokens >= self.worker.ctx_size

    def _save(self, turn: list[dict]) -> None:
        """Appends a finished turn (user message, reply) to the saved conversation, creating it on the first."""
        if self.saved is None:
            return
        if self.conversation_id is None:
            self.conversation_id = self.saved.create(title_for(turn[0]["content"]), self.worker.model_name)
            self.saved.set_settings(self.conversation_id, self.settings.to_dict())
        for m in turn:
            self.saved.add(self.conversation_id, m["role"], m["content"])
        self.run_worker(self.refresh_sidebar(), group="sidebar")

    async def on_sidebar_resume(self, message: Sidebar.Resume) -> None:
        await self.action_new()
        self.conversation_id = message.conversation_id
        self.history = self.saved.messages(message.conversation_id)
        self.settings = Settings.from_dict(self.saved.settings(message.conversation_id), self.default_settings)
        view = self.conversation
        for i, m in enumerate(self.history):
            if m["role"] == "user":
                view.add_user(m["content"], turn=i)
            else:
                view.add_assistant(m["content"], raw=self.raw)
        await self.refresh_sidebar()

    def on_sidebar_rename(self, message: Sidebar.Rename) -> None:
        async def done(title: str | None) -> None:
            if title:
                self.saved.rename(message.conversation_id, title)
                await self.refresh_sidebar()

        self.push_screen(RenameScreen(message.title), done)

    async def on_sidebar_delete(self, message: Sidebar.Delete) -> None:
        if message.conversation_id == self.conversation_id:
            await self.action_new()  # first: a reply in progress is stopped and saved before its row goes
            self.query_one(Sidebar).list_view.focus()
        self.saved.delete(message.conversation_id)
        await self.refresh_sidebar()

    # -- actions --------------------------------------------------------------------------------------
    def action_stop(self) -> None:
        """Esc: stops the reply in progress, or else gives up editing a message."""
        if self.reply is not None:
            self.reply.stop()
            self._drain()
        elif self.editing is not None:
            self.query_one(ChatInput).clear()
            self._end_edit()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.help_rows()))

    def action_toggle_raw(self) -> None:
        self.raw = not self.raw
        self.conversation.set_raw(self.raw)

    async def action_new(self) -> None:
        self.action_stop()  # the reply in progress, or else the message being edited
        self.conversation_id = None
        self.settings = self.default_settings
        self.history = []
        await self.conversation.clear()
        self.status.reset()
        self.query_one(ChatInput).focus()

    def action_regenerate(self) -> None:
        """Replaces the last reply with a new one to the same conversation; after a reply the engine refused
        (an error), sends that message again instead, in place of the failed attempt."""
        if self.busy():
            return
        mine = self.conversation.query(UserMessage)
        if mine and mine.last().turn is None:  # the engine refused it: it is not in self.history
            if self.editing is not None:
                self.action_stop()  # gives up editing it (F4), as Esc does
            text = mine.last().text
            self.conversation.drop_from(mine.last())
            self.send(text)
            return
        if not self.history or self.history[-1]["role"] != "assistant":
            return
        self.history.pop()
        self.conversation.drop_last_reply()
        if self.saved is not None and self.conversation_id is not None:
            self.saved.truncate(self.conversation_id, len(self.history) - 1)  # the turn is saved again, whole
        self._start_reply()

    def action_edit_last(self) -> None:
        """Puts the last message back in the input; sending it replaces that turn (see on_chat_input_submitted)."""
        if why := self.busy():
            self.notify(why, severity="warning")
            return
        mine = self.conversation.query(UserMessage)
        if not mine:
            self.notify("There is no message to edit yet.")
            return
        self.editing = mine.last()
        box = self.query_one(ChatInput)
        box.load_text(self.editing.text)
        box.move_cursor(box.document.end)
        box.border_title = "editing your last message: Enter resends it, Esc cancels"
        box.focus()

    def action_settings(self) -> None:
        if len(self.screen_stack) == 1:
            self.push_screen(SettingsScreen(self.settings), self._set_settings)

    def _set_settings(self, settings: Settings | None) -> None:
        if settings is None:
            return
        self.settings = settings
        if self.saved is not None and self.conversation_id is not None:
            self.saved.set_settings(self.conversation_id, settings.to_dict())
        self.notify("Settings saved: the next reply uses them.")

    def action_pick_model(self) -> None:
        if len(self.screen_stack) == 1:
            self.push_screen(ModelPicker(self.store.models(), self.worker.model_name), self._switch_model)

    def _switch_model(self, model: StoredModel | None) -> None:
        if model is None or model.name == self.worker.model_name:
            return
        if why := self.busy():
            self.notify(why, severity="warning")
            return
        self.loading = model.name
        self.conversation.add_note(f"loading {model.name} …")
        self.run_worker(lambda: self._load(model), thread=True, group="model")

    def _load(self, model: StoredModel) -> None:
        """Worker thread: opens the model and hands it to the reply worker."""
        try:
            llm = self.load_model(model.path)
        except Exception as e:
            self.post_message(ModelLoaded(model.name, str(e) or type(e).__name__))
            return
        self.worker.swap(llm, model.name)
        self.post_message(ModelLoaded(model.name))

    def on_model_loaded(self, message: ModelLoaded) -> None:
        self.loading = None
        if message.error is not None:
            self.conversation.add_error(f"could not load {message.name}: {message.error}")
            return
        self.status.set_model(self.worker.model_name, self.worker.ctx_size, self.worker.kv_type)
        self.conversation.add_note(f"now chatting with {message.name}")

    def action_copy(self) -> None:
        replies = [m["content"] for m in self.history if m["role"] == "assistant"]
        if replies:
            self.copy_to_clipboard(replies[-1])
            self.notify("Copied the last reply.")

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def action_toggle_sidebar(self) -> None:
        panel = self.query_one(Sidebar)
        if self.saved is None:
            self.notify("Conversations are not saved in this session.")
            return
        panel.display = not panel.display
        if panel.display:
            panel.list_view.focus()
        else:
            self.query_one(ChatInput).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """PgUp / PgDn scroll the conversation only when it is on top; over a dialog they are the dialog's keys."""
        if action in ("scroll_up", "scroll_down"):
            return len(self.screen_stack) == 1
        return True

    def action_scroll_up(self) -> None:
        self.conversation.scroll_page_up()

    def action_scroll_down(self) -> None:
        self.conversation.scroll_page_down()
