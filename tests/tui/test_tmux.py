"""`localllm chat` in a real terminal (tmux, 80x24), driven as a person would: send-keys, capture-pane."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("textual")

import localllm
from conftest import model_file

# `localllm chat` through cli.main, with "chat" registered as cli.COMMANDS has it
RUNNER = (
    "import sys; from localllm import cli; "
    "cli.COMMANDS.setdefault('chat', ('localllm.commands.chat', 'chat')); sys.exit(cli.main())"
)


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def wait_screen(session: str, pred, timeout: float = 15.0) -> str:
    end = time.monotonic() + timeout
    while True:
        screen = tmux("capture-pane", "-t", session, "-p")
        if pred(screen):
            return screen
        if time.monotonic() > end or "EXIT=" in screen:  # timed out, or the command has ended
            raise AssertionError(f"screen never matched:\n{screen}")
        time.sleep(0.1)


@pytest.mark.model
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_chat_in_tmux(tmp_path):
    path = model_file("smollm2-135m-instruct-q4_1")
    session = f"localllm-test-{os.getpid()}"
    here = Path(localllm.__file__).parent.parent  # the localllm this test imports, for the child too
    env = f"PYTHONPATH={shlex.quote(str(here))} LOCALLLM_HOME={shlex.quote(str(tmp_path))}"
    cmd = (
        f"{env} {shlex.quote(sys.executable)} -c {shlex.quote(RUNNER)} chat {shlex.quote(str(path))} "
        f"-t 2 -c 512 --temperature 0 -n 200; echo EXIT=$?; sleep 30"
    )
    tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd)
    try:
        wait_screen(session, lambda s: "F1 help" in s)
        tmux("send-keys", "-t", session, "hi", "Enter")
        screen = wait_screen(session, lambda s: "assistant" in s and "F1 help" in s)
        assert "│ hi" in screen and "tg " in screen and "t/s" in screen and "error" not in screen
        tmux("send-keys", "-t", session, "Write a long story about a dragon and a knight.", "Enter")
        wait_screen(session, lambda s: "Esc stops" in s)
        tmux("send-keys", "-t", session, "Escape")
        wait_screen(session, lambda s: "stopped" in s and "F1 help" in s, timeout=5)
        tmux("send-keys", "-t", session, "C-q")
        wait_screen(session, lambda s: "EXIT=0" in s, timeout=10)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)
