"""Errors a request can get, in OpenAI's shape ({"error": {"message", "type", "param", "code"}}) on /v1 and the
llama.cpp routes, in Ollama's ({"error": "message"}) on /api, in Anthropic's ({"type": "error", "error": {"type",
"message"}}) on /v1/messages. User input never produces a 500.

    raise APIError(400, "temperature must be ...", param="temperature")
    raise APIError(400, "...", code="context_length_exceeded")
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "invalid_request_error",
    503: "server_busy",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def error_response(request: Request, status: int, message: str, param=None, code=None, headers=None) -> JSONResponse:
    if request.url.path.startswith("/api/"):
        body: dict = {"error": message}
    elif request.url.path.startswith("/v1/messages"):  # Anthropic's shape
        kind = _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        body = {"type": "error", "error": {"type": kind, "message": message, "param": param}}
    else:
        kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def param_of(message: str) -> str | None:
    """The field a SamplingParams / engine ValueError names first ("temperature must be ..."), if any."""
    word = message.split(" ", 1)[0]
    return word if word.isidentifier() else None
