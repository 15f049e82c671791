"""The request bodies the API declares, as pydantic models: every field a route reads, its
type and its limits, checked in one pass (`strict`: a bool is no number, 1.5 no integer, "1"
neither) and published as the routes' schema at /openapi.json. Fields no model declares are
ignored, as OpenAI-compatible servers do; null is a field left out, as OpenAI's API has it.

A check that needs more than the body (the models served, the sampling's ranges, which the
library checks) or that weighs one field against another across the request is
`requests.py`'s; these models hold what the body alone says."""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from specrun.core.loop import MAX_TOP_LOGPROBS

# Which endpoint a body is for: /v1/chat/completions, /v1/completions, /infill, /v1/embeddings.
EndpointName = Literal["chat", "completion", "infill", "embedding"]
Role = Literal["system", "developer", "user", "assistant", "tool"]
FUNCTION_NAME = r"^[A-Za-z0-9_-]{1,64}$"  # OpenAI's rule for a function's name
# A token id as a JSON object's key: ten digits hold any vocabulary's (Python's int() refuses
# over 4300, a 500 where the key is the client's mistake).
TOKEN_ID = r"^\s*[0-9]{1,10}\s*$"
MAX_CHOICES = 128  # answers one request may ask for (`n`), as OpenAI allows
MAX_COMPLETION_LOGPROBS = 5  # the legacy completions API's most likely tokens at a position
# Stop strings a request may give: OpenAI's API takes 4, llama-server any number. Four times
# OpenAI's, each longer than any stop a chat needs: a request's matcher (StopStrings in
# specrun.core.text, built once, in time linear in their length) takes at most some 20 ms.
MAX_STOPS = 16
MAX_STOP_CHARS = 1000
TOO_LONG = ("too_long", "string_too_long")  # pydantic's errors of a value beyond its length


def one_error(
    what: str,
    code: Literal["invalid_type", "invalid_value"] = "invalid_type",
    *,
    bounded: str | None = None,
) -> WrapValidator:
    """A field that fails anywhere is one error, `must be <what>`, at the field: a union's
    alternatives would each report their own, under names no client sent. `bounded`: what a
    value beyond a declared length must be instead, its own error (`invalid_value`)."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as error:
            if bounded and any(detail["type"] in TOO_LONG for detail in error.errors()):
                raise PydanticCustomError("invalid_value", "must be " + bounded) from None
            raise PydanticCustomError(code, "must be " + what) from None

    return WrapValidator(validate)


def required() -> PydanticCustomError:
    """The error of a field absent where the request needs it."""
    return PydanticCustomError("missing", "Field required")


class Body(BaseModel):
    """A JSON object of a request body."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, given: Any) -> Any:
        if isinstance(given, dict):
            return {key: value for key, value in given.items() if value is not None}
        return given


JsonSchema = Annotated[dict[str, Any] | bool, one_error("a JSON schema (an object, or a bool)")]
StopString = Annotated[str, Field(max_length=MAX_STOP_CHARS)]
STOPS_BOUNDED = f"at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS} characters each"
# Stop strings as a list only (Anthropic's `stop_sequences`, Ollama's `options.stop`).
StopList = Annotated[
    list[StopString],
    Field(max_length=MAX_STOPS),
    one_error("a list of strings", bounded=STOPS_BOUNDED),
]


# --- chat messages ------------------------------------------------------------------------------


class TextPart(Body):
    """A part of a message's content: text (the only kind a text model reads)."""

    type: Literal["text"]
    text: str


class FunctionCall(Body):
    name: str
    arguments: str = Field("{}", description="the arguments, as JSON text")

    @field_validator("arguments")
    @classmethod
    def _json_text(cls, arguments: str) -> str:
        try:
            json.loads(arguments or "{}")
        except ValueError:
            raise PydanticCustomError("invalid_value", "must be JSON text") from None
        return arguments


class AssistantToolCall(Body):
    """A call an assistant made, sent back with the conversation."""

    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Body):
    """A message of the conversation. Its content may be left out only by an assistant that
    called tools; a tool's result names the call it answers."""

    role: Role
    tool_calls: list[AssistantToolCall] | None = None  # an assistant's
    tool_call_id: str | None = Field(None, validate_default=True)  # a tool's result
    content: Annotated[
        str | list[TextPart] | None, one_error("a string or a list of text parts")
    ] = Field(None, validate_default=True)

    @field_validator("tool_call_id")
    @classmethod
    def _answers_a_call(cls, call: str | None, info: ValidationInfo) -> str | None:
        if call is None and info.data.get("role") == "tool":
            raise required()
        return call

    @field_validator("content")
    @classmethod
    def _said_or_called(cls, content: Any, info: ValidationInfo) -> Any:
        called = info.data.get("role") == "assistant" and info.data.get("tool_calls")
        if content is None and not called:
            raise required()
        return content


# --- tools and constraints ----------------------------------------------------------------------


class FunctionDefinition(Body):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str = ""
    parameters: dict[str, Any] | None = Field(
        None, description="a JSON schema of the arguments (an object's); none: no arguments"
    )


class ToolDefinition(Body):
    """A function the model may call."""

    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(Body):
    name: str


class NamedToolChoice(Body):
    """A call of this function, and no other answer."""

    type: Literal["function"]
    function: FunctionName


class JsonSchemaFormat(Body):
    name: str | None = None
    schema_: JsonSchema = Field(alias="schema")


class ResponseFormat(Body):
    """OpenAI's constraint on the answer: plain text, any JSON object, or JSON that keeps to
    `json_schema.schema`."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = Field(None, validate_default=True)

    @field_validator("json_schema")
    @classmethod
    def _given_for_its_type(
        cls, form: JsonSchemaFormat | None, info: ValidationInfo
    ) -> JsonSchemaFormat | None:
        if form is None and info.data.get("type") == "json_schema":
            raise required()
        return form


class StreamOptions(Body):
    include_usage: bool = Field(
        False, description="a last chunk with the usage, after every other's null usage"
    )


# --- the generation endpoints -------------------------------------------------------------------

SERVER_DEFAULT = "left out: the server's own (its command line's)"


class RouteBody(Body):
    """A route's whole body, whose fields `requests.checked` checks as its endpoint's."""

    endpoint: ClassVar[EndpointName]


class GenerationBody(RouteBody):
    """What the generation endpoints take."""

    model: str | None = Field(None, description="left out: the server's first model")
    n: int = Field(1, ge=1, le=MAX_CHOICES, description="answers to the one prompt")
    max_tokens: int | None = Field(None, description="left out: until the context is full")
    max_completion_tokens: int | None = Field(None, description="max_tokens' newer name")
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: Annotated[
        StopString | Annotated[list[StopString], Field(max_length=MAX_STOPS)] | None,
        one_error(
            "a string or a list of strings",
            bounded=STOPS_BOUNDED,
        ),
    ] = None
    temperature: float | None = Field(None, description=SERVER_DEFAULT)
    top_p: float | None = Field(None, description=SERVER_DEFAULT)
    min_p: float | None = Field(None, description=SERVER_DEFAULT)
    top_k: int | None = Field(None, description=SERVER_DEFAULT)
    seed: int | None = Field(None, description="left out: a different answer each time")
    presence_penalty: float | None = Field(None, description=SERVER_DEFAULT)
    frequency_penalty: float | None = Field(None, description=SERVER_DEFAULT)
    repeat_penalty: float | None = Field(None, description=SERVER_DEFAULT)
    repeat_last_n: int | None = Field(None, description=SERVER_DEFAULT)
    logit_bias: Annotated[
        dict[Annotated[str, Field(pattern=TOKEN_ID)], float] | None,
        one_error("an object of token ids to biases", "invalid_value"),
    ] = None
    response_format: ResponseFormat | None = None
    grammar: str | None = Field(None, description="llama-server's: a GBNF grammar")
    json_schema: JsonSchema | None = Field(
        None, description="llama-server's: a JSON schema the answer keeps to"
    )


class ChatCompletionRequest(GenerationBody):
    """A /v1/chat/completions body: a conversation to answer."""

    endpoint = "chat"

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDefinition] | None = None
    tool_choice: Annotated[
        Literal["none", "auto", "required"] | NamedToolChoice | None,
        one_error(
            'none, auto, required or {"type": "function", "function": {"name": ...}}',
            "invalid_value",
        ),
    ] = None
    parallel_tool_calls: bool = Field(
        True, description="several calls in one answer; false: one at most"
    )
    logprobs: bool = Field(False, description="each token's log-probability")
    top_logprobs: int | None = Field(
        None, ge=0, le=MAX_TOP_LOGPROBS, description="the most likely tokens listed at each token"
    )
    reasoning_effort: Literal["none", "low", "medium", "high"] | None = Field(
        None,
        description="how hard a reasoning model thinks, where its template reads it (gpt-oss); "
        "none: no thinking, where the template can switch it off (llama-server's)",
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="arguments the chat template's render gets, e.g. enable_thinking"
    )


class CompletionRequest(GenerationBody):
    """A /v1/completions body: text, sent to the model as is, to continue."""

    endpoint = "completion"

    prompt: str
    logprobs: int | None = Field(
        None,
        ge=0,
        le=MAX_COMPLETION_LOGPROBS,
        description="the most likely tokens listed at each position, with their log-probabilities",
    )
    suffix: str | None = Field(
        None,
        description="the text after the answer: filled in between (FIM), by a model with FIM "
        "tokens; an editor's autocomplete sends it",
    )


class InfillChunk(Body):
    """Another file's text that may help fill in the middle."""

    text: str
    filename: str = "tmp"  # llama-server's name where none is given


class InfillRequest(GenerationBody):
    """An /infill body (llama-server's): the text to fill in between `input_prefix` and
    `input_suffix`, by a model with FIM tokens."""

    endpoint = "infill"

    input_prefix: str
    input_suffix: str
    input_extra: list[InfillChunk] = Field([], description="other files' text that may help")
    prompt: str = Field("", description="the start of the middle, written already")
    n_predict: int | None = Field(
        None, ge=-1, description="llama-server's max_tokens, which it replaces; -1: no limit"
    )
    n: int = Field(1, ge=1, le=1, description="one answer: /infill gives one")


class EmbeddingRequest(RouteBody):
    """A /v1/embeddings body: text, or token ids, to turn into vectors."""

    endpoint = "embedding"

    input: Annotated[
        str | list[str] | list[int] | list[list[int]],
        one_error("a string, a list of strings, a list of token ids or a list of such lists"),
    ]
    model: str | None = Field(None, description="left out: the server's first embedding model")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: each vector's float32 values, little-endian, in base64"
    )
    dimensions: int | None = Field(
        None, ge=1, description="the model's own size only: vectors are not shortened"
    )
