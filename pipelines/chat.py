"""The ``chat`` and ``completions`` pipelines: an item is one OpenAI request body, answered as it asks.

The bodies are those of OpenAI's ``/v1/chat/completions`` and ``/v1/completions`` (and vLLM's ``run-batch``):
strict models, so an unknown field, ``stream: true`` or ``n > 1`` is refused with the field's name instead of
being ignored. Chat messages are rendered by the served model's own chat template; ``image_url`` parts (data
URLs, or URLs and paths the settings allow) are loaded and sized by the feeder within the job's visual-token
budget; ``response_format`` ``json_schema`` (or ``json_object``) goes to structured outputs. The answer is
kept as the model wrote it, with its finish reason; ``pipelines.openai_batch`` builds the response body.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipelines.base import ImageBudget, RequestPipeline, RequestSpec

CHAT_ENDPOINT = "/v1/chat/completions"
COMPLETIONS_ENDPOINT = "/v1/completions"


class RequestOptions(BaseModel):
    """A batch's own limits: every line is held to them (per-line fields cannot raise them)."""

    model_config = ConfigDict(extra="forbid")

    max_visual_tokens: int = Field(1024, ge=4, le=16384, description="Visual-token budget per image.")
    images_per_prompt: int = Field(4, ge=1, le=64, description="Most images one request may hold.")
    default_max_tokens: int = Field(
        512, ge=1, le=131072, description="Answer length when a request gives no max_tokens."
    )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImageURL(_Strict):
    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ImagePart(_Strict):
    type: Literal["image_url"]
    image_url: ImageURL


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart | ImagePart]
    name: str | None = None


class JsonSchemaFormat(_Strict):
    name: str = Field(min_length=1, max_length=64)
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class _Sampling(_Strict):
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    user: str | None = None
    # Accepted only at their one supported value, so a request relying on another is refused, not misread.
    n: Literal[1] = 1
    stream: Literal[False] = False

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences")
        return value

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def sampling(self) -> dict[str, Any]:
        """The body's sampling as ``RequestSpec`` fields: the same for a chat and a completion."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "stop": self.stops(),
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
        }


class ChatBody(_Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    response_format: ResponseFormat | None = None

    def output_schema(self) -> dict[str, Any] | None:
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return {"type": "object"}
        if fmt.json_schema is None:
            raise ValueError("response_format json_schema needs its json_schema object")
        return fmt.json_schema.schema_ or {"type": "object"}


class CompletionBody(_Sampling):
    prompt: str | list[str]
    echo: Literal[False] = False

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("one prompt per request (a list of prompts is n requests: give each its own line)")
        return value

    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


def template_messages(body: ChatBody) -> tuple[dict[str, Any], ...]:
    """The messages as a chat template takes them: image parts become ``{"type": "image"}`` in order."""
    out: list[dict[str, Any]] = []
    for m in body.messages:
        role = "system" if m.role == "developer" else m.role
        if isinstance(m.content, str):
            out.append({"role": role, "content": m.content})
            continue
        parts = [{"type": "text", "text": p.text} if isinstance(p, TextPart) else {"type": "image"} for p in m.content]
        out.append({"role": role, "content": parts})
    return tuple(out)


class Chat(RequestPipeline):
    name = "chat"
    version = "1"
    endpoint = CHAT_ENDPOINT
    Options = RequestOptions
    Body: ClassVar[type[BaseModel]] = ChatBody

    def budget(self, opts: RequestOptions) -> ImageBudget:
        return ImageBudget(max_visual_tokens=opts.max_visual_tokens, images_per_prompt=opts.images_per_prompt)

    def sources(self, body: dict[str, Any]) -> list[str]:
        found = []
        for m in body.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            for part in content if isinstance(content, list) else []:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    found.append(str((part.get("image_url") or {}).get("url", "")))
        return found

    def request(self, body: dict[str, Any], opts: RequestOptions) -> RequestSpec:
        b = ChatBody.model_validate(body)
        return RequestSpec(
            max_tokens=b.max_completion_tokens or b.max_tokens or opts.default_max_tokens,
            messages=template_messages(b),
            json_schema=b.output_schema(),
            **b.sampling(),
        )

    def parse(self, text: str, opts: RequestOptions, *, finish_reason: str | None) -> dict[str, Any]:
        return {"text": text, "finish_reason": finish_reason or "stop"}


class Completions(Chat):
    name = "completions"
    endpoint = COMPLETIONS_ENDPOINT
    Body = CompletionBody

    def sources(self, body: dict[str, Any]) -> list[str]:
        return []

    def request(self, body: dict[str, Any], opts: RequestOptions) -> RequestSpec:
        b = CompletionBody.model_validate(body)
        return RequestSpec(
            max_tokens=b.max_tokens or opts.default_max_tokens,
            prompt=b.text(),
            **b.sampling(),
        )


CHAT = Chat()
COMPLETIONS = Completions()
