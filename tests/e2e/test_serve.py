"""`specrun serve` as a client meets it: the real command on a free local port, spoken to
with the official `openai` client, httpx, and raw sockets where a client must vanish; and,
where a test must see the engine itself, the server's app in this process."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import openai
import pydantic
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specrun.core.loop import Round
from specrun.core.sampling import SamplingParams
from specrun.core.stats import Stats
from specrun.engine import Engine
from specrun.options import DraftOptions, LoadOptions
from specrun.server.app import Api
from specrun.server.pool import ModelPool
from specrun.server.requests import UNSUPPORTED
from specrun.server.worker import Worker
from tests.support.server import Server, chat

COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"  # the demo model counts on for hundreds of tokens


@pytest.fixture(scope="module")
def server(tiny_target: Path, tiny_draft: Path):
    running = Server("-t", str(tiny_target), "-d", str(tiny_draft), "--gamma", "3")
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def demo_server(demo_pair: tuple[Path, Path]):
    """The real pair: slow enough that a generation is still running while a test acts."""
    running = Server(
        "-t", str(demo_pair[0]), "-d", str(demo_pair[1]), "--parallel", "1", "--queue", "1"
    )
    yield running
    assert running.stop() == 0


def run_json(*args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "specrun", "run", "--threads", "1", "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def greedy_run_json(target: Path, draft: Path, tokens: int, *args: str) -> dict:
    """`run --json` with the `server` fixture's pair and γ, greedy: the answer it must give."""
    pair = ("-t", str(target), "-d", str(draft), "--gamma", "3", "--temp", "0")
    return run_json(*pair, "-n", str(tokens), *args)


def open_stream(server: Server, body: dict) -> socket.socket:
    """A streaming request on a raw socket, read up to its first text: a client that can vanish."""
    host, port = server.url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)), timeout=60)  # recv's deadline
    payload = json.dumps({**body, "stream": True}).encode()
    connection.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(payload), payload)
    )
    received = b""
    while b'"text": "' not in received:
        chunk = connection.recv(4096)
        assert chunk, received
        received += chunk
    return connection


def read_to_end(connection: socket.socket) -> str:
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received.decode()


# --- answers ---------------------------------------------------------------------------------


def test_models_and_health(server):
    assert [model.id for model in server.client().models.list()] == [server.model] == ["target"]
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}


def test_greedy_chat_is_the_answer_of_run_json(server, tiny_target, tiny_draft):
    record = greedy_run_json(tiny_target, tiny_draft, 24, "the sea")
    response = chat(server, "the sea", temperature=0, max_tokens=24)
    assert response.choices[0].message.content == record["text"]
    assert response.choices[0].finish_reason == record["finish_reason"]
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (
        record["prompt_tokens"],
        record["generated_tokens"],
    )
    figures = response.model_extra["specrun"]
    assert (
        figures.keys() == Stats().as_dict().keys() and figures.keys() <= record.keys()
    )  # --json's names
    assert (
        figures["generated_tokens"] == response.usage.completion_tokens and figures["drafted"] > 0
    )


def test_completions_send_the_prompt_as_is(server, tiny_target, tiny_draft):
    record = greedy_run_json(tiny_target, tiny_draft, 20, "--raw", "the cat is")
    response = server.client().completions.create(
        model=server.model, prompt="the cat is", temperature=0, max_tokens=20
    )
    assert response.choices[0].text == record["text"]
    assert response.usage.prompt_tokens == record["prompt_tokens"]


def test_streamed_chat_is_the_whole_answer_in_chunks(server):
    whole = chat(server, "hello world", temperature=0, max_tokens=30)
    chunks = list(chat(server, "hello world", temperature=0, max_tokens=30, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert (
        "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
        == whole.choices[0].message.content
    )
    last = chunks[-1]
    assert last.choices[0].finish_reason == whole.choices[0].finish_reason
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.model_extra["specrun"]["generated_tokens"] == whole.usage.completion_tokens
    assert all(chunk.choices[0].finish_reason is None for chunk in chunks[:-1])


def test_a_stream_ends_with_done(server):
    body = {"prompt": "the sea", "max_tokens": 8, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    last = json.loads(events[-2].removeprefix("data: "))
    assert last["object"] == "text_completion" and last["choices"][0]["finish_reason"] == "length"
    assert last["usage"]["completion_tokens"] == 8


def test_stop_text_and_the_token_limit_set_the_finish_reason(server):
    client = server.client()
    full = client.completions.create(
        model=server.model, prompt="the sea", temperature=0, max_tokens=24
    )
    assert full.choices[0].finish_reason == "length" and len(full.choices[0].text) > 6
    stop = full.choices[0].text[4:7]
    cut = client.completions.create(
        model=server.model, prompt="the sea", temperature=0, max_tokens=24, stop=[stop]
    )
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == full.choices[0].text[: full.choices[0].text.index(stop)]


@pytest.mark.parametrize("narrowing", [{"top_k": 1}, {"top_p": 1e-6}, {"min_p": 0.999}])
def test_sampling_fields_mean_what_the_options_mean(server, narrowing):
    """Each narrowing leaves only the most likely token, so a hot sample is the greedy answer."""
    greedy = chat(server, "the cat", temperature=0, max_tokens=24).choices[0].message.content
    hot = chat(server, "the cat", temperature=1.5, seed=3, max_tokens=24, extra_body=narrowing)
    assert hot.choices[0].message.content == greedy


def test_a_seed_repeats_a_sampled_answer(server):
    answers = {
        chat(server, "the dog", temperature=1.0, seed=11, max_tokens=24).choices[0].message.content
        for _ in range(2)
    }
    assert len(answers) == 1


def test_the_next_turn_reuses_the_cached_prefix(server):
    first = chat(server, "the sun and the moon", temperature=0, max_tokens=16)
    messages = [
        {"role": "user", "content": "the sun and the moon"},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "and the tree"},
    ]
    second = server.client().chat.completions.create(
        model=server.model, messages=messages, temperature=0, max_tokens=16
    )
    figures = second.model_extra["specrun"]
    assert figures["prompt_evaluated"] <= figures["prompt_tokens"] - first.usage.prompt_tokens


def test_stats_count_every_request(server):
    before = server.stats()
    chat(server, "the road", temperature=0, max_tokens=5)
    after = server.stats()
    assert after["model"] == server.model and after["running"] == [] and after["queued"] == 0
    assert after["totals"]["requests"] == before["totals"]["requests"] + 1
    assert after["totals"]["completion_tokens"] == before["totals"]["completion_tokens"] + 5


# --- in process: the engine under the server ------------------------------------------------


def test_each_request_samples_with_its_own_settings_and_leaves_the_engines(tiny_target, tiny_draft):
    """Two requests in a row on one engine: each answer is its own settings' (the second's
    unset top_k is the server's, not the first's), and `engine.params`, the command line's,
    stays as it was: a request's settings go to `Engine.stream`, not into the shared engine."""
    defaults = SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, seed=1)
    requests = [
        {"temperature": 1.5, "seed": 11, "top_k": 1},  # only the likeliest token: greedy
        {"temperature": 1.5, "seed": 11},  # top_k the server's 0 (off): a real sample
    ]
    with Engine.load(
        tiny_target,
        tiny_draft,
        options=LoadOptions(threads=1),
        params=defaults,
        drafting=DraftOptions(gamma="3"),
    ) as engine:
        tokens = engine.prompt("the cat is", raw=True)
        expected = [
            "".join(
                event.text
                for event in engine.stream(
                    tokens, max_tokens=24, params=replace(defaults, **fields)
                )
                if isinstance(event, Round)
            )
            for fields in requests
        ]
        assert expected[0] != expected[1] and engine.params is defaults
        worker = Worker(ModelPool.of(engine, "target"), queue=1, defaults=defaults)

        async def one_after_the_other() -> list[str]:
            transport = httpx.ASGITransport(Api(worker).app(None))
            answers = []
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            ) as client:
                for fields in requests:
                    body = {"prompt": "the cat is", "max_tokens": 24, **fields}
                    response = await client.post("/v1/completions", json=body)
                    assert response.status_code == 200, response.text
                    answers.append(response.json()["choices"][0]["text"])
                    assert engine.params is defaults
            return answers

        try:
            assert asyncio.run(one_after_the_other()) == expected
        finally:
            worker.close()


# --- bad requests ----------------------------------------------------------------------------

CHAT_PATH, COMPLETIONS_PATH = "/v1/chat/completions", "/v1/completions"
HELLO = [{"role": "user", "content": "hello"}]
BAD_REQUESTS = {
    "malformed JSON": (CHAT_PATH, b'{"messages": [', 400, None, None),
    "not an object": (CHAT_PATH, b"[1, 2]", 400, None, None),
    "no messages": (CHAT_PATH, {}, 400, "messages", "missing_required_parameter"),
    "no prompt": (COMPLETIONS_PATH, {"max_tokens": 4}, 400, "prompt", "missing_required_parameter"),
    "messages not a list": (CHAT_PATH, {"messages": "hello"}, 400, "messages", "invalid_type"),
    "no messages at all": (CHAT_PATH, {"messages": []}, 400, "messages", "invalid_value"),
    "content a number": (
        CHAT_PATH,
        {"messages": [{"role": "user", "content": 5}]},
        400,
        "messages[0].content",
        "invalid_type",
    ),
    "unknown role": (
        CHAT_PATH,
        {"messages": [{"role": "robot", "content": "hi"}]},
        400,
        "messages[0].role",
        "invalid_value",
    ),
    "prompt a list": (COMPLETIONS_PATH, {"prompt": [1, 2]}, 400, "prompt", "invalid_type"),
    "temperature a word": (
        CHAT_PATH,
        {"messages": HELLO, "temperature": "hot"},
        400,
        "temperature",
        "invalid_type",
    ),
    "max_tokens a fraction": (
        CHAT_PATH,
        {"messages": HELLO, "max_tokens": 1.5},
        400,
        "max_tokens",
        "invalid_type",
    ),
    "max_tokens a bool": (
        CHAT_PATH,
        {"messages": HELLO, "max_tokens": True},
        400,
        "max_tokens",
        "invalid_type",
    ),
    "stream a word": (
        CHAT_PATH,
        {"messages": HELLO, "stream": "yes"},
        400,
        "stream",
        "invalid_type",
    ),
    "stop a number": (CHAT_PATH, {"messages": HELLO, "stop": 3}, 400, "stop", "invalid_type"),
    "negative temperature": (
        CHAT_PATH,
        {"messages": HELLO, "temperature": -1},
        400,
        "temperature",
        "invalid_value",
    ),
    "top_p zero": (CHAT_PATH, {"messages": HELLO, "top_p": 0}, 400, "top_p", "invalid_value"),
    "top_p above one": (
        CHAT_PATH,
        {"messages": HELLO, "top_p": 1.5},
        400,
        "top_p",
        "invalid_value",
    ),
    "min_p one": (CHAT_PATH, {"messages": HELLO, "min_p": 1}, 400, "min_p", "invalid_value"),
    "negative top_k": (CHAT_PATH, {"messages": HELLO, "top_k": -1}, 400, "top_k", "invalid_value"),
    "negative seed": (CHAT_PATH, {"messages": HELLO, "seed": -1}, 400, "seed", "invalid_value"),
    "zero max_tokens": (
        COMPLETIONS_PATH,
        {"prompt": "hi", "max_tokens": 0},
        400,
        "max_tokens",
        "invalid_value",
    ),
    "no answers": (CHAT_PATH, {"messages": HELLO, "n": 0}, 400, "n", "invalid_value"),
    "more answers than the server holds": (
        CHAT_PATH,
        {"messages": HELLO, "n": 100},
        400,
        "n",
        "invalid_value",
    ),
    "prompt longer than the context": (
        CHAT_PATH,
        {"messages": [{"role": "user", "content": "the " * 1100}]},
        400,
        "messages",
        "context_length_exceeded",
    ),
    "unknown model": (
        CHAT_PATH,
        {"model": "gpt-4", "messages": HELLO},
        404,
        "model",
        "model_not_found",
    ),
    "body over the limit": (
        COMPLETIONS_PATH,
        b'{"prompt": "' + b"a" * (4 * 2**20) + b'"}',
        413,
        None,
        "body_too_large",
    ),
    "unknown path": ("/v1/audio/speech", {"input": "hi"}, 404, None, None),
}


# A value of each field the server knows but does not act on that asks for something.
ASKING = {
    "functions": [{"name": "get_time", "parameters": {}}],
    "function_call": {"name": "get_time"},
    "response_format": {"type": "json_object"},
    "grammar": 'root ::= "yes"',
    "json_schema": {"type": "object"},
    "audio": {"voice": "alloy", "format": "wav"},
    "modalities": ["text", "audio"],
    "prediction": {"type": "content", "content": "hello"},
    "web_search_options": {},
    "reasoning_effort": "high",
    "echo": True,
    "best_of": 3,
}
# ... and values that ask for nothing, as clients send them.
NEUTRAL = {
    "tool_choice": "none",
    "response_format": {"type": "text"},
    "modalities": ["text"],
    "user": "someone",  # bookkeeping, known and ignored
    "metadata": {"run": "7"},
    "store": False,
    "some_future_field": {"x": 1},  # unknown: ignored
}


@pytest.mark.parametrize("field", [f for f in UNSUPPORTED], ids=lambda f: f.name)
def test_a_field_the_server_does_not_act_on_is_refused_by_name(server, field):
    """Nothing a client relies on is dropped silently: a tool, a schema, a penalty that the
    answer would ignore is a 400 that names it."""
    if field.name == "web_search_options":
        value = {"search_context_size": "low"}
    else:
        value = ASKING[field.name]
    for endpoint in field.endpoints:
        path, body = (
            (CHAT_PATH, {"messages": HELLO})
            if endpoint == "chat"
            else (COMPLETIONS_PATH, {"prompt": "hi"})
        )
        response = httpx.post(f"{server.url}{path}", json={**body, field.name: value})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["param"], error["code"]) == (field.name, "unsupported_parameter")
        assert f"`{field.name}`" in error["message"]


def test_values_that_ask_for_nothing_are_answered(server):
    chat_body = {"messages": HELLO, "max_tokens": 2, **NEUTRAL}
    response = httpx.post(f"{server.url}{CHAT_PATH}", json=chat_body)
    assert response.status_code == 200, response.text
    completion = {"prompt": "hi", "max_tokens": 2, "echo": False, "best_of": 1, "logprobs": 0}
    assert httpx.post(f"{server.url}{COMPLETIONS_PATH}", json=completion).status_code == 200


def test_streamed_usage_comes_alone_at_the_end_when_asked(server):
    """stream_options.include_usage, as the openai client reads it: every chunk's usage is
    null but the last one's, which has no choices."""
    stream = server.client().chat.completions.create(
        model=server.model,
        messages=HELLO,
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.usage is None for c in chunks[:-1]) and chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 6
    assert chunks[-2].choices[0].finish_reason == "length"
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text == chat(server, "hello", max_tokens=6, temperature=0).choices[0].message.content
    not_streamed = {"messages": HELLO, "stream_options": {"include_usage": True}}
    response = httpx.post(f"{server.url}{CHAT_PATH}", json=not_streamed)
    assert response.status_code == 400 and response.json()["error"]["param"] == "stream_options"


def test_metrics_are_prometheus_text_with_the_speculation_counters(server):
    chat(server, "hello", max_tokens=8)
    ended = ("stop", "length", "cancelled", "failed")
    stats = server.wait_for(  # a request is counted just after its answer is sent
        lambda f: f["totals"]["requests"] == sum(f["totals"][e] for e in ended)
    )["totals"]
    response = httpx.get(f"{server.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    value = {name: sum(s.value for s in f.samples) for name, f in families.items()}
    assert value["specrun:generation_tokens"] == stats["completion_tokens"] > 0
    assert value["specrun:prompt_tokens"] == stats["prompt_tokens"]
    assert value["specrun:num_requests_running"] == 0
    assert [(s.labels["model"], s.value) for s in families["specrun:model_loaded"].samples] == [
        (server.model, 1)
    ]
    assert families["specrun:spec_decode_num_drafts"].type == "counter"
    drafted = value["specrun:spec_decode_num_draft_tokens"]
    accepted = value["specrun:spec_decode_num_accepted_tokens"]
    assert drafted > 0 and 0 < accepted <= drafted  # the tiny pair drafts at γ 3
    per_position = families["specrun:spec_decode_num_accepted_tokens_per_pos"].samples
    assert sum(s.value for s in per_position) == accepted
    assert [s.labels["position"] for s in per_position] == ["0", "1", "2"]
    reasons = {
        s.labels["finished_reason"]: s.value for s in families["specrun:request_success"].samples
    }
    assert reasons["length"] == stats["length"] and reasons["stop"] == stats["stop"]


def test_logprobs_whole_and_streamed_chat_and_completions(server):
    """The openai client reads each token's log-probability and the most likely tokens,
    the same whether streamed or not; the legacy completions lists line up with the text."""
    client = server.client()
    asked = dict(model=server.model, messages=HELLO, max_tokens=8, temperature=0)
    whole = client.chat.completions.create(**asked, logprobs=True, top_logprobs=2)
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens
    answer = bytes(b for entry in content for b in entry.bytes)  # a token may split a character
    assert answer.decode("utf-8", errors="replace") == whole.choices[0].message.content
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert bytes(entry.bytes).decode("utf-8", errors="replace") == entry.token
    streamed = client.chat.completions.create(**asked, logprobs=True, top_logprobs=2, stream=True)
    pieces = [
        c.choices[0].logprobs.content for c in streamed if c.choices and c.choices[0].logprobs
    ]
    assert [(e.token, round(e.logprob, 4)) for part in pieces for e in part] == [
        (e.token, round(e.logprob, 4)) for e in content
    ]
    plain = client.chat.completions.create(**asked)
    assert plain.choices[0].logprobs is None  # not asked for
    legacy = client.completions.create(
        model=server.model, prompt="the cat", max_tokens=6, temperature=0, logprobs=3
    )
    figures = legacy.choices[0].logprobs
    assert len(figures.tokens) == len(figures.token_logprobs) == legacy.usage.completion_tokens
    assert figures.text_offset == [
        sum(len(t) for t in figures.tokens[:i]) for i in range(len(figures.tokens))
    ]
    assert all(len(top) <= 3 for top in figures.top_logprobs)
    refused = httpx.post(f"{server.url}{CHAT_PATH}", json={"messages": HELLO, "top_logprobs": 2})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "top_logprobs"
    too_many = httpx.post(f"{server.url}{COMPLETIONS_PATH}", json={"prompt": "a", "logprobs": 6})
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "logprobs"


def test_penalties_and_logit_bias_change_the_answer_as_run_does(server, tiny_target, tiny_draft):
    """The penalty fields mean what `run`'s options mean: the same greedy answer."""
    fields = {"presence_penalty": 1.5, "frequency_penalty": 0.5, "repeat_penalty": 1.3}
    bias = {"7": 5.0}
    body = {"prompt": "the cat", "max_tokens": 16, "temperature": 0, **fields, "logit_bias": bias}
    served = httpx.post(f"{server.url}{COMPLETIONS_PATH}", json=body).json()
    expected = greedy_run_json(
        tiny_target,
        tiny_draft,
        16,
        "--raw",
        "--presence-penalty",
        "1.5",
        "--frequency-penalty",
        "0.5",
        "--repeat-penalty",
        "1.3",
        "--logit-bias",
        "7+5",
        "the cat",
    )
    assert served["choices"][0]["text"] == expected["text"]
    plain = httpx.post(
        f"{server.url}{COMPLETIONS_PATH}",
        json={"prompt": "the cat", "max_tokens": 16, "temperature": 0},
    ).json()
    assert plain["choices"][0]["text"] != expected["text"]
    bad = httpx.post(f"{server.url}{CHAT_PATH}", json={"messages": HELLO, "logit_bias": {"x": 1}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "logit_bias"
    beyond = {"messages": HELLO, "logit_bias": {"1000000": 1}}  # past the vocabulary
    unknown = httpx.post(f"{server.url}{CHAT_PATH}", json=beyond)
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "logit_bias"
    far = httpx.post(f"{server.url}{CHAT_PATH}", json={"messages": HELLO, "presence_penalty": 3})
    assert far.status_code == 400 and far.json()["error"]["param"] == "presence_penalty"


class Cat(pydantic.BaseModel):
    name: str
    age: int
    indoor: bool


CAT = "Describe a cat as JSON, with its name, its age and whether it lives indoors."


def test_structured_output_keeps_to_the_schema(demo_pair):
    """The openai client's own structured output (a pydantic model as `response_format`),
    any JSON streamed, and llama-server's `grammar` field, on the real pair."""
    demo_server = Server("-t", str(demo_pair[0]), "-d", str(demo_pair[1]), "--gamma", "3")
    try:
        structured_answers(demo_server)
    finally:
        assert demo_server.stop() == 0


def structured_answers(demo_server: Server) -> None:
    client = demo_server.client()
    parsed = client.chat.completions.parse(
        model=demo_server.model,
        messages=[{"role": "user", "content": CAT}],
        response_format=Cat,
        max_tokens=96,
        temperature=0.7,
        seed=1,
    )
    assert isinstance(parsed.choices[0].message.parsed, Cat)
    assert parsed.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model=demo_server.model,
        messages=[
            {"role": "user", "content": "Give a JSON object with the keys a and b set to 1 and 2."}
        ],
        response_format={"type": "json_object"},
        max_tokens=96,
        temperature=0,
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert isinstance(json.loads(text), dict)
    answer = client.completions.create(
        model=demo_server.model,
        prompt="Is the sky blue? Answer:",
        max_tokens=8,
        extra_body={"grammar": 'root ::= " yes" | " no"'},
    )
    assert answer.choices[0].text in (" yes", " no")


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
        },
    },
}


def tool_round_trip(demo_server: Server, stream: bool) -> None:
    """A request with tools; the model must call one (`required`, kept to by a grammar);
    the call's result goes back as a `tool` message; the final answer is text."""
    client = demo_server.client()
    messages: list = [{"role": "user", "content": "What is the weather in Paris?"}]
    asked = dict(model=demo_server.model, tools=[WEATHER_TOOL], max_tokens=64, temperature=0)
    if stream:
        chunks = list(
            client.chat.completions.create(
                messages=messages, tool_choice="required", stream=True, **asked
            )
        )
        deltas = [c.choices[0].delta for c in chunks if c.choices and c.choices[0].delta.tool_calls]
        assert len(deltas) == 1 and chunks[-1].choices[0].finish_reason == "tool_calls"
        call = deltas[0].tool_calls[0]
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
    else:
        first = client.chat.completions.create(messages=messages, tool_choice="required", **asked)
        assert first.choices[0].finish_reason == "tool_calls"
        call = first.choices[0].message.tool_calls[0]
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
    assert name == "get_weather" and isinstance(json.loads(arguments)["city"], str)
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": '{"sky": "sunny", "celsius": 21}'},
    ]
    final = client.chat.completions.create(messages=messages, tool_choice="none", **asked)
    assert final.choices[0].message.tool_calls is None
    assert final.choices[0].message.content and final.choices[0].finish_reason in ("stop", "length")


def test_a_tool_call_round_trip_whole_and_streamed(demo_pair):
    demo_server = Server("-t", str(demo_pair[0]), "-d", str(demo_pair[1]), "--gamma", "3")
    try:
        tool_round_trip(demo_server, stream=False)
        tool_round_trip(demo_server, stream=True)
        named = demo_server.client().chat.completions.create(
            model=demo_server.model,
            messages=[{"role": "user", "content": "Paris?"}],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=64,
        )
        assert named.choices[0].message.tool_calls[0].function.name == "get_weather"
        # Offered tools, an answer in words still streams as it comes (this model answers so).
        words = dict(
            model=demo_server.model,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[WEATHER_TOOL],
            max_tokens=24,
            temperature=0,
        )
        whole = demo_server.client().chat.completions.create(**words)
        assert whole.choices[0].message.tool_calls is None
        chunks = list(demo_server.client().chat.completions.create(**words, stream=True))
        parts = [
            c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
        ]
        assert len(parts) > 2 and "".join(parts) == whole.choices[0].message.content
    finally:
        assert demo_server.stop() == 0


TOOL_ERRORS = {
    "a choice of no tool": ({"tool_choice": "required"}, "tool_choice"),
    "a choice of another tool": (
        {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "x"}}},
        "tool_choice",
    ),
    "a tool without a name": (
        {"tools": [{"type": "function", "function": {}}]},
        "tools[0].function.name",
    ),
    "a schema no grammar can be made of": (
        {
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"properties": 5}}}
            ],
            "tool_choice": "required",
        },
        "tools[0].function.parameters",
    ),
    "a result without its call": (
        {"messages": [*HELLO, {"role": "tool", "content": "21"}]},
        "messages[1].tool_call_id",
    ),
    "a call and a schema at once": (
        {
            "tools": [WEATHER_TOOL],
            "tool_choice": "required",
            "response_format": {"type": "json_object"},
        },
        "tool_choice",
    ),
}


CONSTRAINT_ERRORS = {
    "a grammar that does not parse": ({"grammar": "root ::= ("}, "grammar"),
    "an unknown format": ({"response_format": {"type": "xml"}}, "response_format.type"),
    "a schema format without one": (
        {"response_format": {"type": "json_schema"}},
        "response_format.json_schema",
    ),
    "two constraints": (
        {"response_format": {"type": "json_object"}, "grammar": 'root ::= "x"'},
        "grammar",
    ),
}


@pytest.mark.parametrize("case", [*TOOL_ERRORS, *CONSTRAINT_ERRORS])
def test_a_bad_tool_or_constraint_is_named(server, case):
    fields, param = {**TOOL_ERRORS, **CONSTRAINT_ERRORS}[case]
    response = httpx.post(f"{server.url}{CHAT_PATH}", json={"messages": HELLO, **fields})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_a_bad_request_gets_an_openai_error_and_the_server_serves_on(server, case):
    path, body, status, param, code = BAD_REQUESTS[case]
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(
        f"{server.url}{path}", content=content, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error.keys() == {"message", "type", "param", "code"} and error["message"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert chat(server, "hello", max_tokens=2).usage.completion_tokens >= 1


def test_a_chunked_body_over_the_limit_is_refused(server):
    def chunks():  # no Content-Length: the size shows only while reading
        for _ in range(5):
            yield b" " * 2**20

    response = httpx.post(
        f"{server.url}{COMPLETIONS_PATH}",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"


def test_a_wrong_method_is_an_openai_error(server):
    response = httpx.get(f"{server.url}{CHAT_PATH}")
    assert (
        response.status_code == 405 and response.json()["error"]["message"] == "Method Not Allowed"
    )


# --- slots: several requests at once -------------------------------------------------------


def test_concurrent_requests_each_answer_as_they_would_alone(server):
    """Eight greedy requests at once on four slots: each answer is the one the same request
    gets alone, whatever the others in its batches; where batch numerics flip a near tie (the
    tiny model's logits move by ~1e-3 with the batch), the two best tokens there lie closer
    than 1e-2."""
    prompts = [f"the {word} and the sun" for word in ("cat", "dog", "sea", "road")] * 2
    lengths = [20, 9, 31, 14, 26, 5, 17, 24]

    def ask(prompt: str, n: int):
        return (
            server.client()
            .completions.create(
                model=server.model, prompt=prompt, max_tokens=n, temperature=0, logprobs=2
            )
            .choices[0]
            .logprobs
        )

    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(ask, prompts, lengths))
    for prompt, n, answer in zip(prompts, lengths, together):
        alone = ask(prompt, n)
        if answer.tokens != alone.tokens:
            at = next(i for i, (a, b) in enumerate(zip(answer.tokens, alone.tokens)) if a != b)
            best, second = sorted(alone.top_logprobs[at].values(), reverse=True)[:2]
            assert best - second < 1e-2, (prompt, at, alone.top_logprobs[at])
    figures = server.stats()
    assert figures["slots"] == {"total": 4, "busy": 0} and figures["running"] == []


def test_n_answers_are_generations_of_their_own(server):
    client = server.client()
    body = dict(model=server.model, prompt="the cat", max_tokens=12, temperature=1.0, seed=7)
    answer = client.completions.create(n=3, **body)
    texts = [choice.text for choice in sorted(answer.choices, key=lambda c: c.index)]
    assert [c.index for c in answer.choices] == [0, 1, 2] and len(set(texts)) > 1
    assert answer.usage.completion_tokens == 36 and answer.usage.prompt_tokens > 0
    # Answer i samples from seed + i: the first is the request's own with n = 1.
    assert client.completions.create(**body).choices[0].text == texts[0]
    chunks = list(client.completions.create(n=3, stream=True, **body))
    streamed = ["", "", ""]
    finished = []
    for chunk in chunks:
        for choice in chunk.choices:
            streamed[choice.index] += choice.text
            if choice.finish_reason:
                finished.append(choice.index)
    assert streamed == texts and sorted(finished) == [0, 1, 2]


@pytest.fixture(scope="module")
def slots_server(demo_pair: tuple[Path, Path]):
    """The real pair on two slots and no queue: generations long enough to hold both."""
    running = Server("-t", str(demo_pair[0]), "--parallel", "2", "--queue", "0")
    yield running
    assert running.stop() == 0


def test_full_slots_answer_503_and_a_client_that_leaves_frees_its_slot(slots_server):
    server = slots_server
    long_body = {"prompt": COUNTING, "max_tokens": 2000, "temperature": 0}
    first, second = open_stream(server, long_body), open_stream(server, long_body)
    figures = server.wait_for(lambda s: s["slots"]["busy"] == 2)
    assert figures["queued"] == 0
    with pytest.raises(openai.APIStatusError) as busy:
        server.client().completions.create(model=server.model, prompt="hi", max_tokens=4)
    assert busy.value.status_code == 503 and busy.value.response.headers["retry-after"] == "1"
    first.close()  # its generation ends at its next round, and its slot takes the next request
    server.wait_for(lambda s: s["slots"]["busy"] == 1)
    answer = server.client().completions.create(
        model=server.model, prompt="hi", max_tokens=4, temperature=0
    )
    assert answer.usage.completion_tokens == 4
    assert server.stats()["slots"]["busy"] == 1  # the second runs on
    second.close()
    totals = server.wait_for(lambda s: s["running"] == [])["totals"]
    assert totals["cancelled"] == 2 and totals["rejected"] == 1 and totals["length"] == 1


# --- the queue, disconnects and shutdown -----------------------------------------------------


def test_one_at_a_time_a_full_queue_is_503_and_a_client_that_leaves_cancels(demo_server):
    server = demo_server  # --parallel 1 --queue 1: one generation runs, one request may wait
    long_body = {"prompt": COUNTING, "max_tokens": 2000, "temperature": 0}
    first = open_stream(server, long_body)
    # A rate once a round has decoded: the first token, from the prompt's pass, gives none.
    live = server.wait_for(lambda s: s["running"] and s["running"][0]["recent_tokens_per_second"])[
        "running"
    ][0]
    assert live["recent_tokens_per_second"] > 0 and live["finish_reason"] is None

    waiting = socket.create_connection(
        first.getpeername()
    )  # a queued request whose client then leaves
    payload = json.dumps({"prompt": "hi", "max_tokens": 4}).encode()
    waiting.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload)
    )
    server.wait_for(lambda s: s["queued"] == 1)

    with pytest.raises(openai.APIStatusError) as busy:
        server.client().completions.create(model=server.model, prompt="hi", max_tokens=4)
    assert busy.value.status_code == 503 and busy.value.response.headers["retry-after"] == "1"
    assert busy.value.body["type"] == "server_error" and busy.value.body["code"] == "queue_full"

    waiting.close()
    figures = server.wait_for(lambda s: s["queued"] == 0)
    assert [job["id"] for job in figures["running"]] == [live["id"]]  # the first runs on
    assert figures["totals"]["cancelled"] == 1 and figures["totals"]["rejected"] == 1

    with ThreadPoolExecutor(1) as pool:
        queued = pool.submit(
            server.client().completions.create,
            model=server.model,
            prompt="hi",
            max_tokens=4,
            temperature=0,
        )
        server.wait_for(lambda s: s["queued"] == 1)
        first.close()  # the running generation ends at its next round; the queued one runs
        answer = queued.result(timeout=120)
    assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 4
    totals = server.wait_for(lambda s: s["running"] == [])["totals"]
    assert totals["cancelled"] == 2 and totals["length"] == 1 and totals["stop"] == 0
    assert totals["completion_tokens"] < 2000  # the long generation stopped early


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_running_generation_and_exits_0(demo_pair, signum):
    server = Server("-t", str(demo_pair[0]), "-d", str(demo_pair[1]))
    stream = open_stream(server, {"prompt": COUNTING, "max_tokens": 2000, "temperature": 0})
    assert server.stop(signum) == 0
    rest = read_to_end(stream)
    assert '"code": "shutting_down"' in rest
    assert rest.endswith(
        "data: [DONE]\n\n\r\n0\r\n\r\n"
    )  # the last event, then the end of a chunked body
    stderr = "".join(server.lines)
    assert "Traceback" not in stderr and stderr.rstrip().endswith("specrun: stopped")


# --- security and the command line -----------------------------------------------------------


@pytest.mark.parametrize("given", ["flag", "environment"])
def test_an_api_key_is_required_when_set(tiny_target, given):
    options, env = (
        (["--api-key", "s3cret"], {}) if given == "flag" else ([], {"SPECRUN_API_KEY": "s3cret"})
    )
    server = Server("-t", str(tiny_target), *options, env=env)
    try:
        for wrong in ("wrong", "s3cre"):
            with pytest.raises(openai.AuthenticationError) as refused:
                server.client(api_key=wrong).models.list()
            assert (
                refused.value.status_code == 401 and refused.value.body["code"] == "invalid_api_key"
            )
        assert httpx.get(f"{server.url}/v1/stats").status_code == 401
        assert httpx.get(f"{server.url}/health").status_code == 200
        answer = server.client(api_key="s3cret").completions.create(
            model=server.model, prompt="hi", max_tokens=3
        )
        assert answer.usage.completion_tokens >= 1
    finally:
        assert server.stop() == 0


def test_a_browser_page_is_let_in_from_the_origins_given_only(tiny_target):
    """--cors: a preflight from a listed origin is answered for it, and the answer it asked
    for carries the header a browser needs; another origin gets neither. Behind a key, the
    preflight (which carries none) is still answered, and /metrics needs the key."""
    server = Server(
        "-t", str(tiny_target), "--cors", "http://localhost:3000", "--api-key", "s3cret"
    )
    preflight = {"Access-Control-Request-Method": "POST"}
    asked = {"Access-Control-Request-Headers": "authorization,content-type"}
    try:
        answered = httpx.options(
            f"{server.url}/v1/chat/completions",
            headers={"Origin": "http://localhost:3000", **preflight, **asked},
        )
        assert answered.status_code == 200
        assert answered.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert "authorization" in answered.headers["access-control-allow-headers"].lower()
        refused = httpx.options(
            f"{server.url}/v1/chat/completions",
            headers={"Origin": "http://evil.example", **preflight},
        )
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers
        call = httpx.post(
            f"{server.url}/v1/completions",
            json={"prompt": "hi", "max_tokens": 2},
            headers={"Origin": "http://localhost:3000", "Authorization": "Bearer s3cret"},
        )
        assert call.status_code == 200
        assert call.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert httpx.get(f"{server.url}/metrics").status_code == 401
    finally:
        assert server.stop() == 0
    plain = Server("-t", str(tiny_target))
    try:
        answer = httpx.options(
            f"{plain.url}/v1/chat/completions",
            headers={"Origin": "http://localhost:3000", **preflight},
        )
        assert "access-control-allow-origin" not in answer.headers  # off by default
    finally:
        assert plain.stop() == 0


def test_models_load_when_named_and_go_when_idle_or_crowded(tiny_target, tiny_foreign):
    """Two models from one server: the one a request names answers (loaded then, the other
    let go past --max-models 1), both go after --keep-alive idle, and the default loads
    again for the next request with the same answer."""
    server = Server(
        "-t",
        str(tiny_target),
        "--model",
        str(tiny_foreign),
        "--max-models",
        "1",
        "--keep-alive",
        "1",
    )

    def loaded() -> dict[str, bool]:
        data = httpx.get(f"{server.url}/v1/models").json()["data"]
        return {model["id"]: model["loaded"] for model in data}

    def answer(model: str | None) -> str:
        body = {"prompt": "the cat", "max_tokens": 6, "temperature": 0}
        response = httpx.post(
            f"{server.url}{COMPLETIONS_PATH}", json={**body, **({"model": model} if model else {})}
        )
        assert response.status_code == 200, response.text
        assert response.json()["model"] == (model or "target")
        return response.json()["choices"][0]["text"]

    try:
        assert list(loaded()) == ["target", "foreign"]
        first = answer(None)
        foreign = answer("foreign")
        assert loaded() == {"target": False, "foreign": True} and foreign != first
        assert answer("target") == first and loaded() == {"target": True, "foreign": False}
        idle = server.wait_for(lambda s: not any(m["loaded"] for m in s["models"]))
        assert idle["models"] == [
            {"id": "target", "loaded": False},
            {"id": "foreign", "loaded": False},
        ]
        assert answer(None) == first  # loaded again for it
        by_alias = httpx.post(  # named as the command line named it
            f"{server.url}{COMPLETIONS_PATH}",
            json={
                "prompt": "the cat",
                "max_tokens": 6,
                "temperature": 0,
                "model": str(tiny_foreign),
            },
        )
        assert (
            by_alias.json()["model"] == "foreign"
            and by_alias.json()["choices"][0]["text"] == foreign
        )
        missing = httpx.post(f"{server.url}{COMPLETIONS_PATH}", json={"prompt": "a", "model": "x"})
        assert (
            missing.status_code == 404
            and "`target`, `foreign`" in missing.json()["error"]["message"]
        )
    finally:
        assert server.stop() == 0


def test_two_models_answer_at_once_one_loading_while_the_other_generates(tiny_target, tiny_foreign):
    """Slots of two models: a request for the model not loaded loads it in its own slot's
    thread while requests for the other generate, and every answer is the one it gets alone."""
    server = Server("-t", str(tiny_target), "--model", str(tiny_foreign), "--parallel", "2")

    def answer(model: str) -> str:
        body = {"prompt": "the cat", "max_tokens": 40, "temperature": 0, "model": model}
        response = httpx.post(f"{server.url}{COMPLETIONS_PATH}", json=body, timeout=120)
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]["text"]

    try:
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(answer, ["target", "foreign", "target", "foreign"]))
        assert together[0] == together[2] == answer("target")
        assert together[1] == together[3] == answer("foreign") != together[0]
        models = server.stats()["models"]
        assert models == [{"id": "target", "loaded": True}, {"id": "foreign", "loaded": True}]
    finally:
        assert server.stop() == 0


def test_listening_beyond_loopback_warns(tiny_target):
    server = Server("-t", str(tiny_target), "--host", "0.0.0.0")
    assert server.stop(signal.SIGINT) == 0
    assert any(
        line.startswith(
            "specrun: warning: listening on 0.0.0.0, reachable from other machines, with no API key"
        )
        for line in server.lines
    ), server.lines


def test_a_port_in_use_is_one_line_before_anything_loads(tiny_target):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "specrun", "serve", "-t", str(tiny_target), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == f"specrun: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


@pytest.mark.parametrize(
    "options, message",
    [
        (["--port", "70000"], "--port"),
        (["--api-key", ""], "--api-key"),
        (["--queue", "-1"], "--queue"),
        (["--cors", "localhost:3000/"], "--cors"),
        (["--keep-alive", "-1"], "--keep-alive"),
        (["--model", "+draft.gguf"], "--model"),
    ],
)
def test_bad_options_are_one_line_usage_errors(tiny_target, options, message):
    result = subprocess.run(
        [sys.executable, "-m", "specrun", "serve", "-t", str(tiny_target), *options],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specrun: error: ") and message in lines[0], (
        result.stderr
    )
