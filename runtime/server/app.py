"""The FastAPI application: the routers (openai_api, responses_api, anthropic_api, ollama_api, llama_api), the API key check, the request-body
size limit, CORS (off unless an origin is given), and every error in the documented shape (errors.py): a
validation error is a 400 naming the field, an unknown route a 404, and nothing a client sends produces a
traceback in a response.

    app = create_app(host, api_key="secret", cors_origins=["http://localhost:3000"], max_body_bytes=16 << 20)
"""

from __future__ import annotations

import contextlib
import hmac

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import anthropic_api, llama_api, ollama_api, openai_api, responses_api
from .errors import APIError, error_response
from .host import ModelHost
from .metrics import Metrics
from .response_store import ResponseStore

OPEN_PATHS = ("/health",)  # answered without the key (load balancers, plugin start-up checks)


def create_app(
    host: ModelHost,
    api_key: str | None = None,
    cors_origins: list[str] | None = None,
    max_body_bytes: int = 16 << 20,
    load_on_start: bool = True,
) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if load_on_start:
            await host.start()
        else:
            host.state = "ok"
        yield
        host.close()

    app = FastAPI(title="localllm", lifespan=lifespan)
    app.state.host = host
    app.state.metrics = Metrics()
    app.state.responses = ResponseStore()  # the Responses API's, for previous_response_id
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=cors_origins, allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(_Guard, api_key=api_key, max_body_bytes=max_body_bytes)  # outermost: before CORS

    @app.exception_handler(APIError)
    async def api_error(request: Request, e: APIError):
        return error_response(request, e.status, e.message, e.param, e.code, e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError):
        err = (e.errors() or [{}])[0]
        if err.get("type") == "json_invalid":  # its loc is the byte offset: said in the message, no param
            where = [x for x in err.get("loc", ()) if isinstance(x, int)]
            why = (err.get("ctx") or {}).get("error") or "JSON decode error"
            at = f" at byte {where[0]}" if where else ""
            return error_response(request, 400, f"the request body is not valid JSON: {why}{at}", code="invalid_json")
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        param = ".".join(loc) or None
        msg = f"{param}: {err.get('msg', 'invalid')}" if param else str(err.get("msg", "invalid request body"))
        return error_response(request, 400, msg, param=param, code="invalid_value")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        msg = f"no route {request.method} {request.url.path}" if e.status_code in (404, 405) else str(e.detail)
        return error_response(request, e.status_code, msg, code="request_too_large" if e.status_code == 413 else None)

    @app.exception_handler(Exception)
    async def internal(request: Request, e: Exception):
        return error_response(request, 500, f"internal error ({type(e).__name__})")

    app.include_router(openai_api.router, prefix="/v1")
    app.include_router(anthropic_api.router, prefix="/v1")
    app.include_router(responses_api.router, prefix="/v1")
    app.include_router(ollama_api.router)
    app.include_router(llama_api.router)
    # OpenAI's routes without the /v1 prefix too, as llama.cpp's server answers them (a client configured with a
    # bare base URL sends /chat/completions); left out of the OpenAPI schema, which lists each route once
    app.include_router(openai_api.router, include_in_schema=False)
    return app


class _Guard:
    """The API key (but not for OPEN_PATHS and CORS preflights), the body-size limit (the declared length, and
    the bytes a body without one actually sends), and bodies read as JSON whatever their Content-Type says, as
    Ollama and llama.cpp's server read them (litellm's Ollama providers send none, `curl -d` a form type). Plain
    ASGI rather than @app.middleware("http"), whose wrapper passes every chunk of a streamed response through a
    memory stream and a task switch."""

    def __init__(self, app, api_key: str | None, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes
        self.key = api_key.encode() if api_key is not None else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if self.key is not None and scope["path"] not in OPEN_PATHS and scope["method"] != "OPTIONS":
            given = headers.get(b"authorization", b"")
            given = given[7:] if given[:7].lower() == b"bearer " else headers.get(b"x-api-key", b"")
            if not hmac.compare_digest(given, self.key):
                message = "a valid API key is required (Authorization: Bearer KEY)"
                return await error_response(Request(scope), 401, message, code="invalid_api_key")(scope, receive, send)
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return await self._too_large(scope, receive, send)
        if scope["method"] in ("POST", "PUT", "PATCH"):
            if length is None:
                receive = self._counted(receive)
            if b"json" not in headers.get(b"content-type", b"").lower():
                kept = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
                scope = {**scope, "headers": [*kept, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)

    async def _too_large(self, scope, receive, send) -> None:
        message = f"the request body is larger than {self.max_body_bytes} bytes"
        await error_response(Request(scope), 413, message, code="request_too_large")(scope, receive, send)

    def _counted(self, receive):
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body_bytes:
                raise StarletteHTTPException(413, f"the request body is larger than {self.max_body_bytes} bytes")
            return message

        return counted
