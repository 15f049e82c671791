"""Request checking for `specrun serve`: which Host names and content types reach the API, a
body's bytes into JSON that holds only text and numbers a handler can use, and that JSON's
fields into a typed `GenerationRequest` (the prompt as chat messages or as text, the sampling
over the server's own settings, the token limit, the stop strings); or an `ApiError`, OpenAI's
error shape, which names the field at fault."""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from starlette.responses import JSONResponse

from specrun.core.loop import MAX_TOP_LOGPROBS
from specrun.core.sampling import SamplingParams
from specrun.engine import Engine
from specrun.errors import OptionError, SpecrunError
from specrun.llama.grammar import JSON_GRAMMAR, schema_grammar
from specrun.prompt import Message, render
from specrun.tools import Tool, ToolCall, ToolChoice, call_grammar, tool_format

ROLES = ("system", "user", "assistant", "tool")
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for a function's name
Endpoint = Literal["chat", "completion"]
NUMBER = (int, float)
MAX_CHOICES = 128  # answers one request may ask for (`n`), as OpenAI allows
MAX_DEPTH = 128  # nesting a body may have: OpenAI's bodies need a handful; serde_json's limit
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # JSON's \ud800 escapes: text UTF-8 cannot hold
# OpenAI's error `type`: the client's mistake, or the server's.
ErrorKind = Literal["invalid_request_error", "server_error"]
# The body field that holds the prompt: chat messages, or a completion's text.
PromptField = Literal["messages", "prompt"]


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


def bad_value(error: OptionError) -> ApiError:
    """The library names the option in backquotes, as the API names the field."""
    named = re.search(r"`(\w+)`", str(error))
    return ApiError(400, str(error), param=named.group(1) if named else None, code="invalid_value")


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
        raise ApiError(
            403,
            f"the Host `{name}` is not a name this server answers to; start it with "
            f"--allowed-host {name} to allow it",
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
            + (f"; got `{media}`" if media else ""),
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
    endpoints: tuple[Endpoint, ...]
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


BOTH: tuple[Endpoint, ...] = ("chat", "completion")
UNSUPPORTED = (
    Unsupported("functions", ("chat",), _nothing, "function calls (send `tools`)"),
    Unsupported(
        "function_call", ("chat",), lambda v: v in (None, "none", "auto"), "function calls"
    ),
    Unsupported("audio", ("chat",), _nothing, "audio output"),
    Unsupported("modalities", ("chat",), lambda v: v in (None, ["text"]), "output beyond text"),
    Unsupported("prediction", ("chat",), _nothing, "predicted output"),
    Unsupported("web_search_options", ("chat",), _nothing, "web search"),
    Unsupported("reasoning_effort", ("chat",), _nothing, "a reasoning effort"),
    Unsupported("echo", ("completion",), _nothing, "the prompt echoed"),
    Unsupported("best_of", ("completion",), lambda v: v in (None, 1), "several answers"),
    Unsupported("suffix", ("completion",), _nothing, "text after the answer (infill)"),
)


def _check_supported(body: dict[str, Any], endpoint: Endpoint) -> None:
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
    """A checked request: the prompt (chat messages, or text sent as is) and how to answer."""

    prompt: list[Message] | str
    params: SamplingParams
    model: str  # the id of the model that answers
    max_tokens: int | None  # None: until the context is full
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool = False  # streamed: a last chunk with the usage and no choices
    grammar: str | None = None  # GBNF the answer keeps to (response_format, grammar, json_schema)
    grammar_param: str | None = None  # the field it came from, to name in an error
    logprobs: int | None = None  # each token's log-probability and this many alternatives
    tools: tuple[Tool, ...] = ()  # functions the model may call (chat)
    tool_choice: ToolChoice = "auto"
    n: int = 1  # answers (choices) to the one prompt, each a generation of its own

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
            return call_grammar(list(self.tools), self.tool_choice, tool_format(template))
        return self.grammar

    @property
    def prompt_field(self) -> PromptField:
        return "messages" if isinstance(self.prompt, list) else "prompt"

    def tokens(self, engine: Engine) -> list[int]:
        if isinstance(self.prompt, list):
            return render(engine.target, self.prompt, self.tools if self.calls_tools else ())
        return engine.prompt(self.prompt, raw=True)


def chat_request(
    body: dict[str, Any], models: Mapping[str, str], defaults: SamplingParams
) -> GenerationRequest:
    """A /v1/chat/completions body, for the server of `models` (each name a request may
    give, to the id of its model; the first the default) with sampling `defaults`."""
    _check_supported(body, "chat")
    request = _generation_request(body, models, _messages, defaults)
    tools = _tools(body)
    choice = _tool_choice(body, tools)
    if choice not in ("auto", "none") and request.grammar is not None:
        raise ApiError(
            400,
            f"`tool_choice` {choice!r} and `{request.grammar_param}` each constrain the answer: "
            "send one",
            param="tool_choice",
            code="invalid_value",
        )
    for index, tool in enumerate(tools):  # a required call's grammar is made of the schemas
        if choice in ("required", tool.name):
            _schema(tool.schema, f"tools[{index}].function.parameters")
    request = replace(request, tools=tools, tool_choice=choice)
    top = _field(body, "top_logprobs", (int,), "an integer")
    if _field(body, "logprobs", (bool,), "true or false"):
        return replace(request, logprobs=_bounded(top or 0, "top_logprobs", MAX_TOP_LOGPROBS))
    if top:
        raise ApiError(
            400,
            "`top_logprobs` needs `logprobs`: set it to true",
            param="top_logprobs",
            code="invalid_value",
        )
    return request


def completion_request(
    body: dict[str, Any], models: Mapping[str, str], defaults: SamplingParams
) -> GenerationRequest:
    """A /v1/completions body, whose prompt is sent as is; its `logprobs` is how many of the
    most likely tokens to list at each position (0-5), as OpenAI's legacy API has it."""
    _check_supported(body, "completion")
    request = _generation_request(body, models, _text, defaults)
    top = _field(body, "logprobs", (int,), "an integer (0-5)")
    return request if top is None else replace(request, logprobs=_bounded(top, "logprobs", 5))


def _tools(body: dict[str, Any]) -> tuple[Tool, ...]:
    """`tools`: functions, each with a name, a description and its parameters' schema."""
    given = _field(body, "tools", (list,), "a list of tools") or []
    tools = []
    for index, tool in enumerate(given):
        param = f"tools[{index}]"
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(function, dict)
        ):
            raise ApiError(
                400,
                f'`{param}` must be {{"type": "function", "function": {{...}}}}',
                param=param,
                code="invalid_value",
            )
        name = function.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
            raise ApiError(
                400,
                f"`{param}.function.name` must be 1-64 letters, digits, _ or -",
                param=f"{param}.function.name",
                code="invalid_value",
            )
        description = function.get("description") or ""
        parameters = function.get("parameters")
        if not isinstance(description, str) or not isinstance(parameters, (dict, type(None))):
            raise ApiError(
                400,
                f"`{param}.function` has a text `description` and a schema as `parameters`",
                param=f"{param}.function",
                code="invalid_type",
            )
        tools.append(Tool(name, description, parameters))
    return tuple(tools)


def _tool_choice(body: dict[str, Any], tools: tuple[Tool, ...]) -> ToolChoice:
    """`tool_choice`: none, auto (the default), required, or {"type": "function",
    "function": {"name": ...}} for one of the tools."""
    choice = body.get("tool_choice")
    if choice is None:
        return "auto"
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise ApiError(
                400,
                '`tool_choice` names a function as {"type": "function", "function": {"name": ...}}',
                param="tool_choice",
                code="invalid_value",
            )
        choice = name
    elif choice not in ("none", "auto", "required"):
        raise ApiError(
            400,
            f"`tool_choice` must be none, auto, required or a function, got {json.dumps(choice)}",
            param="tool_choice",
            code="invalid_value",
        )
    if choice not in ("none", "auto") and not any(
        choice in ("required", tool.name) for tool in tools
    ):
        raise ApiError(
            400,
            f"`tool_choice` asks for a call of {'a tool' if choice == 'required' else choice!r}, "
            "which `tools` does not offer",
            param="tool_choice",
            code="invalid_value",
        )
    return str(choice)


def _bounded(value: int, name: str, most: int) -> int:
    if not 0 <= value <= most:
        raise ApiError(
            400,
            f"`{name}` must be between 0 and {most}, got {value}",
            param=name,
            code="invalid_value",
        )
    return value


def _generation_request(
    body: dict[str, Any],
    models: Mapping[str, str],
    prompt: Callable[[dict[str, Any]], list[Message] | str],
    defaults: SamplingParams,
) -> GenerationRequest:
    named = _field(body, "model", (str,), "a string")
    if named is not None and named not in models:
        served = ", ".join(f"`{model}`" for model in dict.fromkeys(models.values()))
        raise ApiError(
            404,
            f"the model `{named}` is not served here; this server has {served}",
            param="model",
            code="model_not_found",
        )
    asked = prompt(body)
    n = _field(body, "n", (int,), "an integer")
    if n is not None and not 1 <= n <= MAX_CHOICES:
        raise ApiError(
            400, f"`n` must be between 1 and {MAX_CHOICES}", param="n", code="invalid_value"
        )
    max_tokens = _field(body, "max_tokens", (int,), "an integer")
    if max_tokens is None:  # the chat API's newer name
        max_tokens = _field(body, "max_completion_tokens", (int,), "an integer")
    stream = bool(_field(body, "stream", (bool,), "true or false"))
    grammar, grammar_param = _grammar(body)
    return GenerationRequest(
        asked,
        _sampling(body, defaults),
        models[named] if named is not None else next(iter(models.values())),
        max_tokens,
        _stop(body),
        stream,
        include_usage=_include_usage(body, stream),
        grammar=grammar,
        grammar_param=grammar_param,
        n=n or 1,
    )


def _grammar(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """The GBNF grammar the answer must keep to, and the field that asked: OpenAI's
    `response_format` (`json_object`, `json_schema`), or llama-server's `grammar` (GBNF) or
    `json_schema` (a schema); one of them at most."""
    asked = [n for n in ("response_format", "grammar", "json_schema") if body.get(n) is not None]
    if len(asked) > 1:
        raise ApiError(
            400,
            f"`{asked[0]}` and `{asked[1]}` each constrain the answer: send one",
            param=asked[1],
            code="invalid_value",
        )
    if not asked:
        return None, None
    name = asked[0]
    if name == "grammar":
        gbnf = _field(body, "grammar", (str,), "a GBNF grammar (a string)")
        return (gbnf or None), "grammar"
    if name == "json_schema":
        schema = _field(body, "json_schema", (dict, bool), "a JSON schema")
        return _schema(schema, "json_schema"), "json_schema"
    form = _field(body, "response_format", (dict,), "an object with a `type`")
    kind = form.get("type")
    if kind == "text":
        return None, None
    if kind == "json_object":
        return JSON_GRAMMAR, "response_format"
    if kind == "json_schema":
        spec = form.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), (dict, bool)):
            raise ApiError(
                400,
                "`response_format.json_schema` must be an object with the `schema`",
                param="response_format.json_schema",
                code="invalid_value",
            )
        return _schema(spec["schema"], "response_format.json_schema.schema"), "response_format"
    raise ApiError(
        400,
        f"`response_format.type` must be text, json_object or json_schema, got {json.dumps(kind)}",
        param="response_format.type",
        code="invalid_value",
    )


def _schema(schema: dict[str, Any] | bool, param: str) -> str:
    try:
        return schema_grammar(schema)
    except SpecrunError as error:
        raise ApiError(400, str(error), param=param, code="invalid_value") from None


def _include_usage(body: dict[str, Any], stream: bool) -> bool:
    """`stream_options.include_usage`; stream options without a stream are a mistake."""
    options = _field(body, "stream_options", (dict,), "an object")
    if options is None:
        return False
    if not stream:
        raise ApiError(
            400,
            "`stream_options` is only for a streamed answer: set `stream` to true",
            param="stream_options",
            code="invalid_value",
        )
    include = options.get("include_usage")
    if include is not None and not isinstance(include, bool):
        raise ApiError(
            400,
            f"`stream_options.include_usage` must be true or false, got {json.dumps(include)[:40]}",
            param="stream_options.include_usage",
            code="invalid_type",
        )
    return bool(include)


def _field(
    body: dict[str, Any], name: str, kinds: tuple[type, ...], what: str, *, required: bool = False
) -> Any:
    """body[name] if it has one of `kinds` (a bool is no number); None when absent or null."""
    value = body.get(name)
    if value is None:
        if required:
            raise ApiError(
                400,
                f"missing required field `{name}`",
                param=name,
                code="missing_required_parameter",
            )
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ApiError(
            400,
            f"`{name}` must be {what}, got {json.dumps(value)[:40]}",
            param=name,
            code="invalid_type",
        )
    return value


def _sampling(body: dict[str, Any], defaults: SamplingParams) -> SamplingParams:
    """The request's sampling fields over the server's own (its --temp, --top-k, ...)."""
    given = {
        "temperature": _field(body, "temperature", NUMBER, "a number"),
        "top_p": _field(body, "top_p", NUMBER, "a number"),
        "min_p": _field(body, "min_p", NUMBER, "a number"),
        "top_k": _field(body, "top_k", (int,), "an integer"),
        "seed": _field(body, "seed", (int,), "an integer"),
        "presence_penalty": _field(body, "presence_penalty", NUMBER, "a number"),
        "frequency_penalty": _field(body, "frequency_penalty", NUMBER, "a number"),
        "repeat_penalty": _field(body, "repeat_penalty", NUMBER, "a number"),
        "penalty_last_n": _field(body, "repeat_last_n", (int,), "an integer"),
        "logit_bias": _logit_bias(body),
    }
    try:
        return replace(
            defaults, **{name: value for name, value in given.items() if value is not None}
        )
    except OptionError as error:
        raise bad_value(error) from None


def _logit_bias(body: dict[str, Any]) -> tuple[tuple[int, float], ...] | None:
    """OpenAI's `logit_bias`: token ids (as JSON's keys, text) to a bias from -100 to 100."""
    bias = _field(body, "logit_bias", (dict,), "an object of token ids to biases")
    if bias is None:
        return None
    pairs = []
    for key, value in bias.items():
        if not key.strip().isdigit() or not isinstance(value, NUMBER) or isinstance(value, bool):
            raise ApiError(
                400,
                f"`logit_bias` maps token ids to numbers, got {json.dumps({key: value})[:60]}",
                param="logit_bias",
                code="invalid_value",
            )
        pairs.append((int(key), float(value)))
    return tuple(pairs)


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and all(isinstance(text, str) for text in stop):
        return tuple(stop)
    raise ApiError(
        400, "`stop` must be a string or a list of strings", param="stop", code="invalid_type"
    )


def _text(body: dict[str, Any]) -> str:
    text: str = _field(body, "prompt", (str,), "a string", required=True)
    return text


def _messages(body: dict[str, Any]) -> list[Message]:
    messages = _field(body, "messages", (list,), "a list of messages", required=True)
    if not messages:
        raise ApiError(400, "`messages` is empty", param="messages", code="invalid_value")
    return [_message(message, f"messages[{index}]") for index, message in enumerate(messages)]


def _message(message: Any, param: str) -> Message:
    if not isinstance(message, dict):
        raise ApiError(
            400,
            f"`{param}` must be an object with `role` and `content`",
            param=param,
            code="invalid_type",
        )
    if message.get("role") not in ROLES:
        role = json.dumps(message.get("role"))
        raise ApiError(
            400,
            f"`{param}.role` must be one of {', '.join(ROLES)}, got {role}",
            param=f"{param}.role",
            code="invalid_value",
        )
    role = message["role"]
    calls = _calls(message.get("tool_calls"), f"{param}.tool_calls") if role == "assistant" else ()
    content = message.get("content")
    if calls and content is None:  # an assistant that only called
        content = ""
    result = Message(role, _content(content, f"{param}.content"), tool_calls=calls)
    if role == "tool":
        call = message.get("tool_call_id")
        if not isinstance(call, str):
            raise ApiError(
                400,
                f"`{param}.tool_call_id` must name the call this result answers",
                param=f"{param}.tool_call_id",
                code="missing_required_parameter",
            )
        result = replace(result, tool_call_id=call)
    return result


def _calls(given: Any, param: str) -> tuple[ToolCall, ...]:
    """An assistant message's `tool_calls`, each with its id, name and arguments (JSON text)."""
    if given is None:
        return ()
    calls = []
    for index, call in enumerate(given if isinstance(given, list) else [None]):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments", "{}"), str)
            or not isinstance(call.get("id", ""), str)
        ):
            raise ApiError(
                400,
                f"`{param}[{index}]` must be a call: "
                '{"id", "type": "function", "function": {"name", "arguments"}}',
                param=f"{param}[{index}]",
                code="invalid_value",
            )
        arguments = function.get("arguments", "{}")
        try:
            json.loads(arguments or "{}")
        except ValueError:
            raise ApiError(
                400,
                f"`{param}[{index}].function.arguments` must be JSON text",
                param=f"{param}[{index}].function.arguments",
                code="invalid_value",
            ) from None
        calls.append(ToolCall(function["name"], arguments, call.get("id", "")))
    return tuple(calls)


def _content(content: Any, param: str) -> str:
    """A message's text: a string, or OpenAI's list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    ):
        return "\n".join(part["text"] for part in content)
    raise ApiError(
        400, f"`{param}` must be a string or a list of text parts", param=param, code="invalid_type"
    )
