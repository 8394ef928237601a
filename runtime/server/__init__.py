"""`localllm serve`: the localhost HTTP endpoint editor plugins and front ends talk to, an OpenAI-compatible API
(/v1), Ollama's (/api) and llama.cpp server's extras (/infill, /tokenize, /detokenize, /health, /metrics), all
over the engine: every HTTP request is an engine request, so concurrent clients share each step and a client
re-sending the same prefix hits the prefix cache.

    app = create_app(ModelHost("qwen2.5-coder:0.5b", llm_kwargs={"n_threads": 2}), api_key=None)
    uvicorn.run(app, host="127.0.0.1", port=8080)

app.py (the FastAPI app, middleware, error shapes), host.py (which models are loaded), errors.py, schemas.py
(request bodies), openai_api.py, ollama_api.py, llama_api.py, completion.py (one request from prompt to chunks),
fim.py (fill-in-the-middle prompts), tool_calls.py (the model's tool calls out of its text), metrics.py.
"""

from __future__ import annotations

from .app import create_app
from .host import ModelHost

__all__ = ["ModelHost", "create_app"]
