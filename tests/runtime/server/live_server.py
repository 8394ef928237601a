"""A real `serve` app on a loopback port, in a thread of the test process: uvicorn over create_app."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import uvicorn
from localllm.server import ModelHost, create_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_server(model: str, api_key: str | None = None, host_kwargs=None, app_kwargs=None, **llm_kwargs):
    """Yields (base_url, app) once the server answers; stops it after. host_kwargs: ModelHost's (max_queue, ...);
    app_kwargs: create_app's (max_body_bytes, cors_origins)."""
    kwargs = {"n_threads": 2, "ctx_size": 2048, "parallel": 4, **llm_kwargs}
    host = ModelHost(model, llm_kwargs=kwargs, **(host_kwargs or {}))
    app = create_app(host, api_key=api_key, **(app_kwargs or {}))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=30)
