"""The chat application: conversation view, message input and status bar over a ChatEngine.

    app = ChatApp(ChatEngine(llm, "smollm2:135m"), system="Be brief.", temperature=0.8, top_p=0.95, max_tokens=None)
    app.run()

One reply at a time: the engine's worker thread streams it, the app is woken (ReplyUpdated) and takes all the
text that arrived since the last wake. The conversation sent to the model is self.history
([{"role", "content"}], without the system message); a reply stopped with Esc keeps its text in it, a turn the
engine refused (an error) is shown but left out of it. With a History, each finished turn (user message and
reply, a stopped reply included) is saved, and the side panel (Ctrl+B) lists, resumes and deletes conversations.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message

from . import chat_input, sidebar
from .chat_input import ChatInput
from .conversation import AssistantMessage, Conversation
from .engine import ChatEngine, End, Reply
from .help import HelpScreen
from .history import History, title_for
from .sidebar import Sidebar
from .status import StatusBar


class ReplyUpdated(Message):
    """Posted from the engine's worker thread: `reply` has text or its end waiting in take()."""

    def __init__(self, reply: Reply):
        super().__init__()
        self.reply = reply


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
        Binding("ctrl+r", "regenerate", "regenerate the last reply", key_display="Ctrl+R"),
        Binding("f3", "copy", "copy the last reply to the clipboard", key_display="F3"),
        Binding("ctrl+t", "toggle_theme", "light / dark theme", key_display="Ctrl+T"),
        Binding("pageup", "scroll_up", "scroll the conversation up", key_display="PgUp", priority=True),
        Binding("pagedown", "scroll_down", "scroll the conversation down", key_display="PgDn", priority=True),
        Binding("ctrl+q", "quit", "quit", key_display="Ctrl+Q", priority=True),
    ]

    def __init__(self, engine: ChatEngine, system: str | None = None, temperature: float = 0.8,
                 top_p: float = 0.95, max_tokens: int | None = None, saved: History | None = None):
        super().__init__()
        self.engine = engine
        self.saved = saved  # where conversations are kept; None: nothing is saved and there is no side panel
        self.conversation_id: int | None = None  # the saved conversation on screen
        self.system = system
        self.sampling = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
        self.history: list[dict] = []
        self.raw = False
        self.reply: Reply | None = None  # the reply in progress
        self.reply_view: AssistantMessage | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield Sidebar(id="sidebar")
            with Vertical(id="chat"):
                yield Conversation(id="conversation")
                yield ChatInput(id="input")
        yield StatusBar(self.engine.model_name, self.engine.ctx_size, self.engine.kv_type)

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
        for b in self.BINDINGS:
            rows.append((b.key_display or b.key, b.description))
        rows.append(("Tab, Shift+Tab", "move between the input and the conversation"))
        rows.append(("Up, Down", "scroll the conversation (when it is focused)"))
        return rows

    def messages(self) -> list[dict]:
        """What the model is sent: the system message (if any), then the conversation."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [dict(m) for m in self.history]

    # -- sending and streaming ------------------------------------------------------------------------
    def on_chat_input_submitted(self, event: ChatInput.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        if self.reply is not None:
            self.notify("A reply is in progress: Esc stops it.", severity="warning")
            return
        self.query_one(ChatInput).clear()
        self.send(text)

    def send(self, text: str) -> None:
        view = self.conversation
        view.add_user(text)
        self.history.append({"role": "user", "content": text})
        self._start_reply()

    def _start_reply(self) -> None:
        """Streams a reply to self.history (which ends with the user's message) into a new message view."""
        self.reply_view = self.conversation.add_assistant(raw=self.raw)
        self.reply = self.engine.start(self.messages(), notify=self._wake, **self.sampling)
        self.status.set_busy(True)

    def _wake(self, reply: Reply) -> None:
        """Engine worker thread: `reply` has something to take."""
        self.post_message(ReplyUpdated(reply))

    def on_reply_updated(self, message: ReplyUpdated) -> None:
        if message.reply is self.reply:
            self._drain()

    def _drain(self) -> None:
        reply, view = self.reply, self.reply_view
        if reply is None or view is None:
            return
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
            conv.add_error(end.error or "the engine failed")
            return
        self.history.append({"role": "assistant", "content": view.text if view is not None else ""})
        self._save(self.history[-2:])
        if end.finish_reason == "stopped":
            conv.add_note("stopped")
        elif end.finish_reason == "length":
            s = end.stats
            full = s is not None and s.prompt_tokens + s.completion_tokens >= self.engine.ctx_size
            conv.add_note("context full: Ctrl+N starts a new conversation" if full else "max tokens reached")

    def _save(self, turn: list[dict]) -> None:
        """Appends a finished turn (user message, reply) to the saved conversation, creating it on the first."""
        if self.saved is None:
            return
        if self.conversation_id is None:
            self.conversation_id = self.saved.create(title_for(turn[0]["content"]), self.engine.model_name)
        for m in turn:
            self.saved.add(self.conversation_id, m["role"], m["content"])
        self.run_worker(self.refresh_sidebar(), group="sidebar")

    async def on_sidebar_resume(self, message: Sidebar.Resume) -> None:
        await self.action_new()
        self.conversation_id = message.conversation_id
        self.history = self.saved.messages(message.conversation_id)
        view = self.conversation
        for m in self.history:
            if m["role"] == "user":
                view.add_user(m["content"])
            else:
                view.add_assistant(m["content"], raw=self.raw)
        await self.refresh_sidebar()

    async def on_sidebar_delete(self, message: Sidebar.Delete) -> None:
        self.saved.delete(message.conversation_id)
        if message.conversation_id == self.conversation_id:
            await self.action_new()
            self.query_one(Sidebar).list_view.focus()
        await self.refresh_sidebar()

    # -- actions --------------------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.reply is not None:
            self.reply.stop()
            self._drain()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.help_rows()))

    def action_toggle_raw(self) -> None:
        self.raw = not self.raw
        self.conversation.set_raw(self.raw)

    async def action_new(self) -> None:
        self.action_stop()
        self.conversation_id = None
        self.history = []
        await self.conversation.clear()
        self.status.reset()
        self.query_one(ChatInput).focus()

    def action_regenerate(self) -> None:
        """Replaces the last reply with a new one to the same conversation."""
        if self.reply is not None or not self.history or self.history[-1]["role"] != "assistant":
            return
        self.history.pop()
        self.conversation.drop_last_reply()
        if self.saved is not None and self.conversation_id is not None:
            self.saved.truncate(self.conversation_id, len(self.history) - 1)  # the turn is saved again, whole
        self._start_reply()

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

    def action_scroll_up(self) -> None:
        self.conversation.scroll_page_up()

    def action_scroll_down(self) -> None:
        self.conversation.scroll_page_down()
