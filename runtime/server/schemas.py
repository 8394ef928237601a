"""Request bodies, validated by pydantic: the OpenAI fields localllm honours (unknown extra fields are ignored, as
OpenAI-compatible servers do), llama.cpp's /infill, /tokenize and /detokenize, and Ollama's /api bodies.
Sampling values are range-checked by SamplingParams (a 400 naming the field), not here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    logit_bias: dict[str, float] | None = None  # OpenAI's: token id (as a string) -> bias in [-100, 100]
    speculative: str | None = None  # "ngram" | "off" | "draft" (serve's draft model): this request's (None: serve's)
    # structured output (structured.py): OpenAI's, and llama.cpp's schema and GBNF grammar
    response_format: dict[str, Any] | None = None
    json_schema: dict[str, Any] | None = None
    grammar: str | None = None


class ChatMessage(_Body):
    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    images: list[Any] | None = None  # Ollama's: refused (messages.py) until a model that reads them runs
    tool_name: str | None = None  # Ollama's name of the tool a "tool" message answers
    reasoning_content: str | None = None  # an assistant turn's reasoning (llama.cpp's and DeepSeek's name)
    thinking: str | None = None  # the same, Ollama's name (and the name gpt-oss's template reads)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    # llama.cpp's: "none" leaves a thinking model's <think> in content (text/reasoning.py); the template's own switches
    reasoning_format: str | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None  # OpenAI's; gpt-oss's template reads it
    chat_template_kwargs: dict[str, Any] | None = None


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] = ""
    suffix: str | None = None
    logprobs: int | None = None
    echo: bool = False


class InfillRequest(_Sampling):
    """llama.cpp's /infill (llama.vscode, llama.vim): the text before and after the cursor, other files' chunks."""

    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[dict[str, Any]] = Field(default_factory=list)  # [{"filename": ..., "text": ...}]
    prompt: str = ""  # text right before the cursor on its line (appended to the prefix)
    n_predict: int | None = None


class TokenizeRequest(_Body):
    content: str
    add_special: bool = False
    model: str | None = None


class DetokenizeRequest(_Body):
    tokens: list[int]
    model: str | None = None


class OllamaOptions(_Body):
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    num_predict: int | None = None
    stop: list[str] | None = None
    speculative: str | None = None  # localllm's: "ngram" | "off" | "draft"


class OllamaChatRequest(_Body):
    model: str
    messages: list[ChatMessage] = Field(default_factory=list)
    stream: bool = True
    options: OllamaOptions | None = None
    tools: list[dict[str, Any]] | None = None
    keep_alive: str | int | float | None = None
    format: Literal["json", ""] | dict[str, Any] | None = None
    # a thinking model's switch; its reasoning comes back as message.thinking. "low" | "medium" | "high": gpt-oss's
    # reasoning effort (it always thinks), as Ollama takes it
    think: bool | Literal["low", "medium", "high"] | None = None


class OllamaGenerateRequest(_Body):
    model: str
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    raw: bool = False
    stream: bool = True
    options: OllamaOptions | None = None
    keep_alive: str | int | float | None = None
    format: Literal["json", ""] | dict[str, Any] | None = None


class OllamaShowRequest(_Body):
    model: str | None = None
    name: str | None = None  # older clients


class AnthropicMessage(_Body):
    role: str
    content: str | list[dict[str, Any]]


class AnthropicMessagesRequest(_Body):
    """Anthropic's POST /v1/messages (anthropic_api.py)."""

    model: str | None = None
    max_tokens: int
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None  # {"type": "enabled" | "disabled", ...}: a thinking model's switch
    # {"format": {"type": "json_schema", "schema": {...}}, "effort": ...}: structured output (structured.py) and the
    # reasoning effort gpt-oss's template reads
    output_config: dict[str, Any] | None = None
    speculative: str | None = None  # localllm's, as on the other routes
    json_schema: dict[str, Any] | None = None  # llama.cpp's structured output fields, as on /v1/chat/completions
    grammar: str | None = None


class AnthropicCountTokensRequest(_Body):
    model: str | None = None
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    output_config: dict[str, Any] | None = None


class ResponsesRequest(_Body):
    """OpenAI's POST /v1/responses (responses_api.py)."""

    model: str | None = None
    input: str | list[dict[str, Any]] = ""
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    store: bool = True
    text: dict[str, Any] | None = None  # {"format": {"type": "text" | "json_object" | "json_schema", ...}}
    reasoning: dict[str, Any] | None = None  # {"effort": "low" | "medium" | "high"}: gpt-oss's template reads it
    metadata: dict[str, Any] | None = None
    speculative: str | None = None  # localllm's, as on the other routes
    grammar: str | None = None  # llama.cpp's GBNF field, as on /v1/chat/completions


class EmbeddingsRequest(_Body):
    """OpenAI's POST /v1/embeddings."""

    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None


class OllamaEmbedRequest(_Body):
    """Ollama's POST /api/embed (input) and the older /api/embeddings (prompt)."""

    model: str
    input: str | list[str] | None = None
    prompt: str | None = None
    truncate: bool = True
    keep_alive: str | int | float | None = None
