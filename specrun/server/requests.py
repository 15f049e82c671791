"""Request checking for `specrun serve`: which Host names and content types reach the API, a
body's bytes into JSON that holds only text and numbers a handler can use, and that JSON, read
as the route's declared body (`bodies.py`), into a typed `GenerationRequest` (the prompt as
chat messages or as text, the sampling over the server's own settings, the token limit, the
stop strings); or an `ApiError`, OpenAI's error shape, which names the field at fault."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, to_json
from starlette.responses import JSONResponse

from specrun.core.sampling import SamplingParams
from specrun.engine import Engine
from specrun.errors import OptionError, SpecrunError
from specrun.fim import Infill, infill_tokens
from specrun.llama.grammar import JSON_GRAMMAR, schema_grammar
from specrun.llama.grammar_limits import GrammarLimitError, check_gbnf
from specrun.prompt import Message, render
from specrun.reasoning import Effort, template_options
from specrun.server.bodies import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    EndpointName,
    GenerationBody,
    InfillRequest,
    NamedToolChoice,
    RouteBody,
)
from specrun.tools import Tool, ToolCall, ToolChoice, call_grammar, tool_format
from specrun.tools.formats import FORMATS

NUMBER = (int, float)
MAX_DEPTH = 128  # nesting a body may have: OpenAI's bodies need a handful; serde_json's limit
MAX_ECHOED_CHARS = 100  # of a client's text that an error quotes back: enough to recognise it
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # JSON's \ud800 escapes: text UTF-8 cannot hold
# OpenAI's error `type`: the client's mistake, or the server's.
ErrorKind = Literal["invalid_request_error", "server_error"]
# The body field that holds the prompt: chat messages, or a completion's text; the field that
# asked to fill in the middle, for a model that cannot or a prompt too long.
PromptField = Literal["messages", "prompt", "suffix", "input_suffix"]
Declared = TypeVar("Declared", bound=RouteBody)
Model = TypeVar("Model", bound=BaseModel)


class ApiError(Exception):
    """An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: ErrorKind = "invalid_request_error",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.param, self.code, self.kind, self.headers = (
            status,
            param,
            code,
            kind,
            headers,
        )

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": str(self),
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), self.status, headers=self.headers)


# The library's options that a body names otherwise (llama-server's name), by the option's.
FIELDS_OF_OPTIONS = {"penalty_last_n": "repeat_last_n"}


def bad_value(error: OptionError) -> ApiError:
    """The library names the option in backquotes, as the API names the field."""
    message = str(error)
    for option, field in FIELDS_OF_OPTIONS.items():
        message = message.replace(f"`{option}`", f"`{field}`")
    named = re.search(r"`(\w+)`", message)
    return ApiError(400, message, param=named.group(1) if named else None, code="invalid_value")


def echoed(text: str) -> str:
    """A client's text as an error quotes it back: its start, where it is long (a 1 MB model
    name would make a 1 MB error), saying how long it was."""
    if len(text) <= MAX_ECHOED_CHARS:
        return text
    return f"{text[:MAX_ECHOED_CHARS]}... ({len(text)} characters)"


# --- what reaches the API -----------------------------------------------------------------------


@dataclass(frozen=True)
class AllowedHosts:
    """The Host names a request may carry. A page whose name is rebound to this machine
    (DNS rebinding) sends its own name, so names are refused unless listed, as Vite and Django
    do: `localhost` and names under `.localhost`, the name the server listens on, and those the
    user adds (`name`, `.domain` for it and its subdomains, `*` for any). An IP address is
    always accepted: it cannot be rebound."""

    names: frozenset[str]

    @classmethod
    def of(cls, listening_on: str, added: Iterable[str] = ()) -> AllowedHosts:
        return cls(frozenset(_bare(name) for name in (".localhost", listening_on, *added)))

    def admit(self, host: str | None) -> None:
        """Raise the 403 for a Host header naming this server by a name it was not given. No
        Host, or an empty one, is admitted: a browser always sends the page's name."""
        name = _bare(host or "")
        if not name or "*" in self.names or name in self.names:
            return
        try:
            ipaddress.ip_address(name)
            return
        except ValueError:
            pass
        labels = name.split(".")
        if any("." + ".".join(labels[i:]) in self.names for i in range(len(labels))):
            return  # under a `.domain` given
        shown = echoed(name)
        raise ApiError(
            403,
            f"the Host `{shown}` is not a name this server answers to; start it with "
            f"--allowed-host {shown} to allow it",
            code="host_not_allowed",
        )


def _bare(host: str) -> str:
    """A Host header's name, without its port, brackets or final dot, in lower case."""
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 address, maybe with a port: [::1]:8080
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:  # a name or IPv4 address with a port; more colons: a bare IPv6
        host = host.partition(":")[0]
    return host.rstrip(".")


def check_json_content(content_type: str | None) -> None:
    """Raise the 415 for a body sent as anything but JSON. A web page may send any site a
    `text/plain` POST without asking first; `application/json` needs the server's consent."""
    media = (content_type or "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(
            415,
            "the body must be JSON, sent with `Content-Type: application/json`"
            + (f"; got `{echoed(media)}`" if media else ""),
            code="unsupported_media_type",
        )


def parse_body(raw: bytes) -> dict[str, Any]:
    """A body's bytes as a JSON object whose text is all Unicode, whose numbers are all finite
    and whose nesting is bounded: checked once here, so no handler meets what it cannot use."""
    try:
        value = json.loads(raw)
    except RecursionError:  # json's own recursion: nested far beyond MAX_DEPTH
        raise ApiError(400, f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:  # not JSON, or not UTF-8
        raise ApiError(400, f"the body is not valid JSON: {error}") from None
    _check_values(value)
    if not isinstance(value, dict):
        raise ApiError(400, "the body must be a JSON object")
    return value


def _check_values(body: Any) -> None:
    """Refuse a lone surrogate in any text (a key included), a number beyond a float's range
    (NaN, Infinity, -Infinity, 1e400), and nesting deeper than MAX_DEPTH, naming where."""
    pending: list[tuple[Any, str, int]] = [(body, "", 0)]  # a value, its path, its depth
    while pending:
        value, path, depth = pending.pop()
        if isinstance(value, (dict, list)):
            if depth == MAX_DEPTH:
                raise ApiError(400, f"the body nests deeper than {MAX_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    _check_text(key, f"a key in `{path}`" if path else "a key of the body", path)
                    inner = f"{path}.{key}" if path else key
                else:
                    inner = f"{path}[{key}]"
                pending.append((item, inner, depth + 1))
        elif isinstance(value, str):
            _check_text(value, f"`{path}`" if path else "the body", path)
        elif isinstance(value, float) and not math.isfinite(value):
            shown = {"inf": "Infinity", "-inf": "-Infinity"}.get(str(value), "NaN")
            raise ApiError(
                400,
                f"`{path}` must be a finite number, got {shown}",
                param=path or None,
                code="invalid_value",
            )


def _check_text(text: str, where: str, path: str) -> None:
    if found := LONE_SURROGATE.search(text):
        raise ApiError(
            400,
            f"{where} is not valid Unicode: it holds the lone surrogate "
            f"\\u{ord(found.group()):04x}, half of a pair",
            param=path or None,
            code="invalid_value",
        )


# --- generation requests ------------------------------------------------------------------------


@dataclass(frozen=True)
class Unsupported:
    """A field OpenAI's API (or llama-server's) defines that this server does not act on. Set
    to anything that asks for something, it is refused by name: an answer that ignored it would
    answer another question (an agent's tools never called, a schema not kept). Fields that
    change nothing in the answer (`user`, `metadata`, `store`, ...) and fields no one defined
    are ignored, as OpenAI-compatible servers do."""

    name: str
    endpoints: tuple[EndpointName, ...]
    asks_nothing: Callable[[Any], bool]  # the values that leave the answer as it is
    what: str  # what the field asks for, in the error's words


def _nothing(value: Any) -> bool:
    """null, false, zero, or empty: asks for nothing (but a bool is not a number here)."""
    return (
        value is None
        or value is False
        or value in ("", [], {})
        or (isinstance(value, NUMBER) and not isinstance(value, bool) and value == 0)
    )


UNSUPPORTED = (
    Unsupported("functions", ("chat",), _nothing, "function calls (send `tools`)"),
    Unsupported(
        "function_call", ("chat",), lambda v: v in (None, "none", "auto"), "function calls"
    ),
    Unsupported("audio", ("chat",), _nothing, "audio output"),
    Unsupported("modalities", ("chat",), lambda v: v in (None, ["text"]), "output beyond text"),
    Unsupported("prediction", ("chat",), _nothing, "predicted output"),
    Unsupported("web_search_options", ("chat",), _nothing, "web search"),
    Unsupported("echo", ("completion",), _nothing, "the prompt echoed"),
    Unsupported("best_of", ("completion",), lambda v: v in (None, 1), "several answers"),
)


def _check_supported(body: dict[str, Any], endpoint: EndpointName) -> None:
    for field in UNSUPPORTED:
        if endpoint in field.endpoints and not field.asks_nothing(body.get(field.name)):
            raise ApiError(
                400,
                f"`{field.name}` asks for {field.what}, which this server does not do yet; "
                "leave it out, or set it to a value that asks for nothing",
                param=field.name,
                code="unsupported_parameter",
            )


@dataclass(frozen=True)
class GenerationRequest:
    """A checked request: the prompt (chat messages, text sent as is, or text to fill in
    between) and how to answer."""

    prompt: list[Message] | str | Infill
    params: SamplingParams
    model: str  # the id of the model that answers
    max_tokens: int | None  # None: until the context is full
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool = False  # streamed: a last chunk with the usage and no choices
    grammar: str | None = None  # GBNF the answer keeps to (response_format, grammar, json_schema)
    grammar_param: str | None = None  # the field it came from (`tools`: a call's), for errors
    logprobs: int | None = None  # each token's log-probability and this many alternatives
    infill_field: PromptField = "suffix"  # the field that asked to fill in the middle, if any
    tools: tuple[Tool, ...] = ()  # functions the model may call (chat)
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True  # several calls in one answer (False: one at most)
    n: int = 1  # answers (choices) to the one prompt, each a generation of its own
    # What the chat template's render gets beside the messages (chat only): the client's own
    # template arguments (OpenAI chat's `chat_template_kwargs`), whether to think (None: as
    # the template does by default; Anthropic's `thinking`, Ollama's `think`, named by
    # `thinking_param` in errors) and how hard (`reasoning_effort`, for gpt-oss's template).
    template_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    thinking: bool | None = None
    thinking_param: str = "thinking"
    reasoning_effort: Effort | None = None

    def choice(self, index: int) -> GenerationRequest:
        """The generation of answer `index`: with a seed, seed + index, so that the answers
        differ and each is reproducible."""
        seed = self.params.seed
        if index == 0 or seed is None:
            return self
        return replace(self, params=replace(self.params, seed=seed + index))

    @property
    def calls_tools(self) -> bool:
        """Whether the answer is read for tool calls."""
        return bool(self.tools) and self.tool_choice != "none"

    def constraint(self, template: str | None) -> str | None:
        """The grammar of the answer: the request's, or where a call is required, the call's
        in the template's syntax."""
        if self.calls_tools and self.tool_choice != "auto":
            return call_grammar(
                self.tools, self.tool_choice, tool_format(template), self.parallel_tool_calls
            )
        return self.grammar

    def shown(self, template: str | None) -> tuple[str, ...]:
        """The special texts the answer keeps: its tool-call syntax's marks, where it is read
        for calls (`Syntax.kept`)."""
        return FORMATS[tool_format(template)].kept if self.calls_tools else ()

    @property
    def prompt_field(self) -> PromptField:
        if isinstance(self.prompt, Infill):
            return self.infill_field
        return "messages" if isinstance(self.prompt, list) else "prompt"

    def tokens(self, engine: Engine) -> list[int]:
        if isinstance(self.prompt, list):
            tools = self.tools if self.calls_tools else ()
            return render(engine.target, self.prompt, tools, self.template_options(engine))
        if isinstance(self.prompt, Infill):
            return infill_tokens(engine.target, self.prompt, self.max_tokens)
        return engine.prompt(self.prompt, raw=True)

    def template_options(self, engine: Engine) -> dict[str, Any]:
        """What the template's render gets beside the messages, checked against the model's
        template (an OptionError naming the field where the model cannot do what it asks)."""
        return template_options(
            engine.target.chat_template,
            engine.target.name,
            self.template_kwargs,
            effort=self.reasoning_effort,
            thinking=self.thinking,
            thinking_field=self.thinking_param,
        )


def checked(declared: type[Declared], body: dict[str, Any]) -> Declared:
    """A body as its route declares it, once no field it refuses by name asks for anything; or
    the 400 that names the first field at fault."""
    _check_supported(body, declared.endpoint)
    return validated(declared, body)


def validated(declared: type[Model], body: dict[str, Any]) -> Model:
    """A body as `declared` (any family's), or the 400 that names the first field at fault,
    by its path in the body, in OpenAI's words (each family writes the error in its shape)."""
    try:
        return declared.model_validate(body)
    except ValidationError as error:
        raise _refusal(error.errors()[0], body) from None


# pydantic's words for what a value must be, in JSON's, each formatted with its error's context.
JSON_WORDS = {
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "too_short": "must have at least {min_length} item(s)",
    "string_pattern_mismatch": "must match the pattern '{pattern}'",
}


def _refusal(error: ErrorDetails, body: dict[str, Any]) -> ApiError:
    """pydantic's error as OpenAI's: the field by its path in `body`, as `messages[0].content`;
    a wrong type is `invalid_type`, a wrong value `invalid_value`."""
    param = ""
    for part in _located(body, error["loc"]) or error["loc"]:
        param += f"[{part}]" if isinstance(part, int) else f".{part}" if param else str(part)
    kind = error["type"]
    if kind == "missing":
        return ApiError(
            400,
            f"missing required field `{param}`",
            param=param,
            code="missing_required_parameter",
        )
    if kind in JSON_WORDS:
        said = JSON_WORDS[kind].format(**error.get("ctx", {}))
    else:  # pydantic's own ("Input should be ...") or the bodies' ("must be ...")
        said = error["msg"].replace("Input should", "must", 1)
    return ApiError(
        400,
        f"`{param}` {said}, got {echoed(to_json(error['input']).decode())}",
        param=param,
        code="invalid_type" if kind.endswith("_type") else "invalid_value",
    )


def _located(value: Any, loc: tuple[int | str, ...]) -> list[int | str] | None:
    """pydantic's `loc` as the path in the body the client sent: without the tags pydantic puts
    in it where a union is told apart by its `type` (Anthropic's blocks: a block's missing
    `text` is at `content[0].text.text`); None where the body does not hold the path (a value
    a validator converted first)."""
    if not loc:
        return []
    part, rest = loc[0], loc[1:]
    held = isinstance(value, dict) and part in value
    indexed = isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value)
    if held or indexed:
        inner = _located(value[part], rest)
        if inner is not None:
            return [part, *inner]
    if isinstance(value, dict) and rest and value.get("type") == part:  # the union's tag
        return _located(value, rest)
    if isinstance(value, dict) and not rest:  # a field the object lacks
        return [part]
    return None


def chat_request(
    asked: ChatCompletionRequest, models: Mapping[str, str], defaults: SamplingParams
) -> GenerationRequest:
    """A /v1/chat/completions body, for the server of `models` (each name a request may
    give, to the id of its model; the first the default) with sampling `defaults`."""
    messages = [_message(message) for message in asked.messages]
    request = _generation_request(asked, models, messages, defaults)
    tools = tuple(
        Tool(tool.function.name, tool.function.description, tool.function.parameters)
        for tool in asked.tools or ()
    )
    choice = _tool_choice(asked.tool_choice, tools)
    if choice not in ("auto", "none") and request.grammar is not None:
        raise ApiError(
            400,
            f"`tool_choice` {choice!r} and `{request.grammar_param}` each constrain the answer: "
            "send one",
            param="tool_choice",
            code="invalid_value",
        )
    request = replace(
        request,
        tools=tools,
        tool_choice=choice,
        template_kwargs=asked.chat_template_kwargs or {},
        # llama-server's "none": no thinking, where the template can switch it off
        thinking=False if asked.reasoning_effort == "none" else None,
        thinking_param="reasoning_effort",
        reasoning_effort=None if asked.reasoning_effort == "none" else asked.reasoning_effort,
    )
    if choice not in ("auto", "none"):
        request = replace(request, grammar_param=_call_grammar_checked(tools, choice))
    request = replace(request, parallel_tool_calls=asked.parallel_tool_calls)
    if asked.logprobs:
        return replace(request, logprobs=asked.top_logprobs or 0)
    if asked.top_logprobs:
        raise ApiError(
            400,
            "`top_logprobs` needs `logprobs`: set it to true",
            param="top_logprobs",
            code="invalid_value",
        )
    return request


def completion_request(
    asked: CompletionRequest, models: Mapping[str, str], defaults: SamplingParams
) -> GenerationRequest:
    """A /v1/completions body, whose prompt is sent as is, or with a `suffix` (not empty: the
    answer ends the text) as the text before the middle to fill in; its `logprobs` is how many
    of the most likely tokens to list at each position, as OpenAI's legacy API has it."""
    prompt = Infill(asked.prompt, asked.suffix) if asked.suffix else asked.prompt
    request = _generation_request(asked, models, prompt, defaults)
    return request if asked.logprobs is None else replace(request, logprobs=asked.logprobs)


def infill_request(
    asked: InfillRequest, models: Mapping[str, str], defaults: SamplingParams
) -> GenerationRequest:
    """An /infill body (llama-server's): the middle between `input_prefix` and `input_suffix`,
    after `prompt`; `n_predict`, where given, replaces `max_tokens` (-1: no limit)."""
    extra = tuple((chunk.filename, chunk.text) for chunk in asked.input_extra)
    infill = Infill(asked.input_prefix, asked.input_suffix, asked.prompt, extra)
    request = _generation_request(asked, models, infill, defaults)
    request = replace(request, infill_field="input_suffix")
    if asked.n_predict is None:
        return request
    return replace(request, max_tokens=None if asked.n_predict == -1 else asked.n_predict)


def _message(message: ChatMessage) -> Message:
    """A declared message as the prompt's: its text parts joined; an assistant's calls and a
    tool's call id, each where its role has one."""
    content = message.content
    text = "\n".join(part.text for part in content) if isinstance(content, list) else content
    calls = tuple(
        ToolCall(call.function.name, call.function.arguments, call.id)
        for call in (message.tool_calls or () if message.role == "assistant" else ())
    )
    call_id = message.tool_call_id if message.role == "tool" else None
    # OpenAI's `developer` is the system role of models before it; templates know `system`
    role = "system" if message.role == "developer" else message.role
    return Message(role, text or "", tool_calls=calls, tool_call_id=call_id)


def _call_grammar_checked(tools: tuple[Tool, ...], choice: ToolChoice) -> str:
    """Check now a required call's grammar (in the syntax most templates use: llama3's differs
    by a key's name), so that the request is refused before it waits for a slot; where it
    fails, the tool whose schema fails alone is named. The field a later failure names."""
    try:
        call_grammar(tools, choice, "hermes")
    except SpecrunError as error:
        for index, tool in enumerate(tools):
            if choice in ("required", tool.name):
                _schema(tool.schema, f"tools[{index}].function.parameters")
        raise ApiError(400, str(error), param="tools", code="invalid_value") from None
    return "tools"


def _tool_choice(choice: str | NamedToolChoice | None, tools: tuple[Tool, ...]) -> ToolChoice:
    """`tool_choice` as the tools read it: none, auto (the default), required, or the name
    of the one function to call, which `tools` must offer."""
    name = choice.function.name if isinstance(choice, NamedToolChoice) else choice or "auto"
    if name not in ("none", "auto") and not any(name in ("required", tool.name) for tool in tools):
        wanted = "a tool" if name == "required" else repr(echoed(name))
        raise ApiError(
            400,
            f"`tool_choice` asks for a call of {wanted}, which `tools` does not offer",
            param="tool_choice",
            code="invalid_value",
        )
    return name


def served_model(named: str | None, models: Mapping[str, str]) -> str:
    """The id of the model a request names, from `models` (each name to its id; the first the
    default, for a request that names none), or the 404 that lists them."""
    if named is None:
        return next(iter(models.values()))
    if named not in models:
        served = ", ".join(f"`{model}`" for model in dict.fromkeys(models.values()))
        raise ApiError(
            404,
            f"the model `{echoed(named)}` is not served here; this server has {served}",
            param="model",
            code="model_not_found",
        )
    return models[named]


def _generation_request(
    asked: GenerationBody,
    models: Mapping[str, str],
    prompt: list[Message] | str | Infill,
    defaults: SamplingParams,
) -> GenerationRequest:
    model = served_model(asked.model, models)
    if asked.stream_options is not None and not asked.stream:
        raise ApiError(
            400,
            "`stream_options` is only for a streamed answer: set `stream` to true",
            param="stream_options",
            code="invalid_value",
        )
    grammar, grammar_param = _grammar(asked)
    return GenerationRequest(
        prompt,
        _sampling(asked, defaults),
        model,
        asked.max_tokens if asked.max_tokens is not None else asked.max_completion_tokens,
        (asked.stop,) if isinstance(asked.stop, str) else tuple(asked.stop or ()),
        asked.stream,
        include_usage=asked.stream_options is not None and asked.stream_options.include_usage,
        grammar=grammar,
        grammar_param=grammar_param,
        n=asked.n,
    )


def _grammar(asked: GenerationBody) -> tuple[str | None, str | None]:
    """The GBNF grammar the answer must keep to, and the field that asked: OpenAI's
    `response_format` (`json_object`, `json_schema`), or llama-server's `grammar` (GBNF) or
    `json_schema` (a schema); one of them at most."""
    given = [
        n for n in ("response_format", "grammar", "json_schema") if getattr(asked, n) is not None
    ]
    if len(given) > 1:
        raise ApiError(
            400,
            f"`{given[0]}` and `{given[1]}` each constrain the answer: send one",
            param=given[1],
            code="invalid_value",
        )
    form = asked.response_format
    if asked.grammar:  # "" asks for no grammar, as llama-server's default
        try:
            check_gbnf(asked.grammar)
        except GrammarLimitError as error:
            raise ApiError(400, str(error), param="grammar", code="invalid_value") from None
        return asked.grammar, "grammar"
    if asked.grammar is not None:
        return None, None
    if asked.json_schema is not None:
        return _schema(asked.json_schema, "json_schema"), "json_schema"
    if form is None or form.type == "text":
        return None, None
    if form.type == "json_object":
        return JSON_GRAMMAR, "response_format"
    assert form.json_schema is not None, "declared: given where the type is json_schema"
    schema = _schema(form.json_schema.schema_, "response_format.json_schema.schema")
    return schema, "response_format"


def _schema(schema: dict[str, Any] | bool, param: str) -> str:
    try:
        return schema_grammar(schema)
    except SpecrunError as error:
        raise ApiError(400, str(error), param=param, code="invalid_value") from None


def _sampling(asked: GenerationBody, defaults: SamplingParams) -> SamplingParams:
    """The request's sampling fields over the server's own (its --temp, --top-k, ...); the
    library checks their ranges, and names the field of one out of its range."""
    bias = asked.logit_bias
    given: dict[str, Any] = {
        "temperature": asked.temperature,
        "top_p": asked.top_p,
        "min_p": asked.min_p,
        "top_k": asked.top_k,
        "seed": asked.seed,
        "presence_penalty": asked.presence_penalty,
        "frequency_penalty": asked.frequency_penalty,
        "repeat_penalty": asked.repeat_penalty,
        "penalty_last_n": asked.repeat_last_n,
        "logit_bias": None if bias is None else tuple((int(t), b) for t, b in bias.items()),
    }
    try:
        return replace(
            defaults, **{name: value for name, value in given.items() if value is not None}
        )
    except OptionError as error:
        raise bad_value(error) from None
