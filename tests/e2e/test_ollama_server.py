"""Ollama's API as its clients meet it: the real `ollama` Python client (and httpx, where a test
must see the wire) against a real `specrun serve` on tiny models: the target with a draft, the
same target again without one, a model with Llama 3.1's chat template (which renders tools),
one with DeepSeek-R1's (which thinks), one with fill-in-the-middle tokens, and an embedding
model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import ollama
import pytest

from tests.support.processes import DEADLINE
from tests.support.server import Server
from tests.support.tinymodels import (
    FIM_TOKENS,
    N_CTX,
    TEMPLATE_MODELS,
    TEMPLATES,
    write_template_model,
    write_tiny_model,
)

GREEDY = {"temperature": 0, "num_predict": 24}
FIM_PREFIX, FIM_SUFFIX = "def the_cat():\n    the sea", "\n    return the dog\n"
HELLO = [{"role": "user", "content": "hello world"}]
CONVERSATION = [
    {"role": "system", "content": "the sun and the moon"},
    {"role": "user", "content": "the sea"},
    {"role": "assistant", "content": "a big red dog"},
    {"role": "user", "content": "and the tree"},
]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8}},
            "required": ["city"],
        },
    },
}
# Llama 3.1's tool call is a bare object, `{"name": ..., "parameters": ...}`: a `format` that
# keeps the answer to one makes a tiny model call the tool.
CALL_FORMAT = {
    "type": "object",
    "properties": {
        "name": {"const": "get_weather"},
        "parameters": WEATHER_TOOL["function"]["parameters"],
    },
    "required": ["name", "parameters"],
}
COLOUR_SIZE = {
    "type": "object",
    "properties": {
        "colour": {"type": "string", "enum": ["red", "blue"]},
        "size": {"type": "integer"},
    },
    "required": ["colour", "size"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, tiny_target: Path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ollama")
    plain = folder / "plain.gguf"  # the target again, served without a draft
    shutil.copyfile(tiny_target, plain)
    return {
        "plain": plain,
        "llama31": write_template_model(folder / "llama31.gguf", "llama-3.1"),
        "r1": write_template_model(folder / "r1.gguf", "deepseek-r1"),
        "coder": write_tiny_model(folder / "coder.gguf", specials=FIM_TOKENS),
    }


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("ollama-embed") / "embedder.gguf", pooling=1)


@pytest.fixture(scope="module")
def server(tiny_target: Path, tiny_draft: Path, models: dict[str, Path], embedder: Path):
    others = [option for path in models.values() for option in ("--model", str(path))]
    running = Server(
        "-t", str(tiny_target), "-d", str(tiny_draft), "--gamma", "3", "--parallel", "2", *others,
        "--embedding-model", str(embedder),
    )  # fmt: skip
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def client(server: Server) -> ollama.Client:
    return ollama.Client(host=server.url, timeout=120)


# --- answers ---------------------------------------------------------------------------------


def test_a_streamed_chat_is_the_whole_answer_in_objects(client):
    whole = client.chat(model="target", messages=HELLO, options=GREEDY)
    parts = list(client.chat(model="target", messages=HELLO, options=GREEDY, stream=True))
    assert whole.message.content and whole.message.role == "assistant"
    assert "".join(part.message.content or "" for part in parts) == whole.message.content
    assert not any(part.done for part in parts[:-1]) and parts[-1].done
    last = parts[-1]
    assert last.done_reason == whole.done_reason == "length"
    assert last.eval_count == whole.eval_count == GREEDY["num_predict"]
    assert last.prompt_eval_count == whole.prompt_eval_count > 0
    assert whole.total_duration >= whole.eval_duration > 0 and whole.prompt_eval_duration > 0


def test_the_wire_is_ndjson_and_the_last_object_has_specrun_figures(server):
    body = {"model": "target", "messages": HELLO, "options": GREEDY}  # streamed by default
    with httpx.stream("POST", f"{server.url}/api/chat", json=body, timeout=60) as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        objects = [json.loads(line) for line in response.iter_lines() if line]
    figures = objects[-1]["specrun"]
    assert figures["generated_tokens"] == objects[-1]["eval_count"] and figures["drafted"] > 0
    assert all("specrun" not in record for record in objects[:-1])


def test_generate_sends_the_prompt_as_the_users_message_or_raw(server, client):
    whole = client.generate(model="target:latest", prompt="the sea", options=GREEDY)
    streamed = client.generate(model="target", prompt="the sea", options=GREEDY, stream=True)
    assert "".join(part.response for part in streamed) == whole.response
    chat = client.chat(
        model="target", messages=[{"role": "user", "content": "the sea"}], options=GREEDY
    )
    assert whole.response == chat.message.content and whole.done_reason == chat.done_reason
    raw = client.generate(model="target", prompt="the cat is", raw=True, options=GREEDY)
    completion = server.client().completions.create(
        model="target", prompt="the cat is", temperature=0, max_tokens=24
    )
    assert raw.response == completion.choices[0].text


@pytest.mark.parametrize("model", ["target", "plain"])
def test_greedy_chat_is_chat_completions_answer_with_and_without_a_draft(server, client, model):
    ours = client.chat(model=model, messages=CONVERSATION, options=GREEDY)
    openai = server.client().chat.completions.create(
        model=model, messages=CONVERSATION, temperature=0, max_tokens=24
    )
    assert ours.message.content == openai.choices[0].message.content
    usage = openai.usage
    assert (ours.prompt_eval_count, ours.eval_count) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )
    # The same weights without a draft: speculation changes nothing in a greedy answer.
    plain = client.chat(model="plain", messages=CONVERSATION, options=GREEDY)
    assert plain.message.content == ours.message.content


def test_structured_output_keeps_to_the_schema(client):
    asked = dict(model="target", messages=HELLO, format=COLOUR_SIZE)
    whole = client.chat(**asked, options={"temperature": 0, "num_predict": 64})
    value = json.loads(whole.message.content)
    assert value.keys() == {"colour", "size"}
    assert value["colour"] in ("red", "blue") and isinstance(value["size"], int)
    sampled = client.chat(**asked, options={"num_predict": 64}, stream=True)
    value = json.loads("".join(part.message.content for part in sampled))
    assert value["colour"] in ("red", "blue") and isinstance(value["size"], int)
    flag = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    answer = client.generate(model="target", prompt="the sea", format=flag, options=GREEDY)
    assert isinstance(json.loads(answer.response)["ok"], bool)


def test_a_tool_call_round_trip(client):
    messages: list = [{"role": "user", "content": "the weather in paris"}]
    options = {"temperature": 0, "num_predict": 192}
    first = client.chat(
        model="llama31",
        messages=messages,
        tools=[WEATHER_TOOL],
        format=CALL_FORMAT,
        options=options,
    )
    (call,) = first.message.tool_calls
    assert call.function.name == "get_weather" and isinstance(call.function.arguments["city"], str)
    assert first.done_reason == "stop" and not first.message.content
    streamed = list(
        client.chat(
            model="llama31",
            messages=messages,
            tools=[WEATHER_TOOL],
            format=CALL_FORMAT,
            options=options,
            stream=True,
        )
    )
    calls = [part.message.tool_calls for part in streamed if part.message.tool_calls]
    assert calls == [first.message.tool_calls] and streamed[-1].done
    # The call goes back as the client keeps it, with its result as a tool message.
    messages += [first.message, {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
    final = client.chat(model="llama31", messages=messages, tools=[WEATHER_TOOL], options=GREEDY)
    assert final.done and final.prompt_eval_count > first.prompt_eval_count


def test_think_is_the_templates_thinking_toggle(client):
    thought = client.chat(model="r1", messages=HELLO, think=True, options=GREEDY)
    assert thought.message.thinking and not thought.message.content  # a tiny model never ends it
    parts = list(client.chat(model="r1", messages=HELLO, think=True, options=GREEDY, stream=True))
    assert "".join(part.message.thinking or "" for part in parts) == thought.message.thinking
    answered = client.chat(model="r1", messages=HELLO, think=False, options=GREEDY)
    assert answered.message.content and not answered.message.thinking
    with pytest.raises(ollama.ResponseError) as refused:  # its template does not think
        client.chat(model="target", messages=HELLO, think=True)
    assert refused.value.status_code == 400 and "`think`" in refused.value.error


def test_generate_with_a_suffix_fills_in_the_middle_as_completions_do(server, client):
    """Continue's and other editors' autocomplete through Ollama: the model's FIM tokens."""
    asked = dict(model="coder", prompt=FIM_PREFIX, suffix=FIM_SUFFIX)
    whole = client.generate(**asked, options=GREEDY)
    completion = server.client().completions.create(
        model="coder", prompt=FIM_PREFIX, suffix=FIM_SUFFIX, temperature=0, max_tokens=24
    )
    assert whole.response == completion.choices[0].text and whole.response
    assert whole.prompt_eval_count == completion.usage.prompt_tokens
    streamed = client.generate(**asked, options=GREEDY, stream=True)
    assert "".join(part.response for part in streamed) == whole.response
    plain = client.generate(model="coder", prompt=FIM_PREFIX, raw=True, options=GREEDY)
    assert plain.prompt_eval_count < whole.prompt_eval_count  # the suffix is in the prompt
    # A model without FIM tokens cannot, and says which field asked.
    error = refused(lambda: client.generate(model="plain", prompt="a", suffix="b"))
    assert error.status_code == 400 and "`suffix`" in error.error, error.error


def test_embed_gives_v1_embeddings_vectors(server, client):
    texts = ["the cat is blue", "hello world"]
    ours = client.embed(model="embedder:latest", input=texts)
    openai = server.client().embeddings.create(model="embedder", input=texts)
    assert ours.model == "embedder:latest" and len(ours.embeddings) == len(texts)
    for vector, item in zip(ours.embeddings, openai.data, strict=True):
        assert np.allclose(vector, item.embedding, atol=1e-6)
        assert abs(np.linalg.norm(vector) - 1) < 1e-5  # Ollama's vectors are at unit length too
    assert ours.prompt_eval_count == openai.usage.prompt_tokens
    one = client.embed(model="embedder", input=texts[0])
    older = client.embeddings(model="embedder", prompt=texts[0])  # /api/embeddings
    assert np.allclose(one.embeddings[0], ours.embeddings[0], atol=1e-6)
    assert np.allclose(older.embedding, ours.embeddings[0], atol=1e-6)
    assert client.embed(model="embedder", input=[]).embeddings == []  # Ollama's load


def test_what_cannot_be_embedded_is_a_400_naming_the_field(client):
    generates = refused(lambda: client.embed(model="target", input="hi"))
    assert generates.status_code == 400 and "`model`" in generates.error
    empty = refused(lambda: client.embed(model="embedder", input=["hi", ""]))
    assert empty.status_code == 400 and "`input[1]`" in empty.error
    long = refused(lambda: client.embeddings(model="embedder", prompt="the sea " * N_CTX))
    assert long.status_code == 400 and "`prompt`" in long.error, long.error
    embeds = refused(lambda: client.chat(model="embedder", messages=HELLO))
    assert embeds.status_code == 400 and "`model`" in embeds.error


def test_the_root_says_ollama_is_running(server):
    """Where Ollama's clients (and their users' scripts) check that a server is up."""
    answer = httpx.get(server.url + "/", timeout=DEADLINE)
    assert (answer.status_code, answer.text) == (200, "Ollama is running")
    assert httpx.head(server.url + "/", timeout=DEADLINE).status_code == 200


# --- models ----------------------------------------------------------------------------------


def test_tags_list_the_models_served(client, tiny_target, models):
    listed = {model.model: model for model in client.list().models}
    assert listed.keys() == {
        *("target:latest", "plain:latest", "llama31:latest", "r1:latest", "coder:latest"),
        "embedder:latest",  # as Ollama lists its embedding models with the others
    }
    target = listed["target:latest"]
    assert target.size == tiny_target.stat().st_size and target.modified_at is not None
    details = target.details
    assert (details.format, details.family, details.quantization_level) == ("gguf", "llama", "F32")
    assert details.parameter_size.endswith("K")  # a tiny model's: tens of thousands


def test_show_reads_the_models_gguf(client, models):
    shown = client.show("llama31:latest")
    template = (TEMPLATES / TEMPLATE_MODELS["llama-3.1"].file).read_text(encoding="utf-8")
    assert shown.template == template and "tools" in shown.capabilities
    info = shown.modelinfo
    assert info["general.architecture"] == "llama" and info["llama.context_length"] == N_CTX
    assert info["general.parameter_count"] > 0 and "tokenizer.chat_template" not in info
    assert "tools" not in client.show("target").capabilities  # its ChatML template has none


def test_ps_lists_the_loaded_models_and_version_says_whose_api(server, client):
    client.chat(model="plain", messages=HELLO, options={"num_predict": 1})
    running = {model.model: model for model in client.ps().models}
    assert "plain:latest" in running and running["plain:latest"].context_length > 0
    version = httpx.get(f"{server.url}/api/version").json()
    assert version.keys() == {"version", "specrun"}


def test_an_empty_request_is_ollamas_load(client):
    assert client.chat(model="plain", messages=[]).done_reason == "load"
    assert client.generate(model="plain", prompt="").done_reason == "load"


# --- errors ----------------------------------------------------------------------------------


def refused(call) -> ollama.ResponseError:
    with pytest.raises(ollama.ResponseError) as raised:
        call()
    return raised.value


def test_an_unknown_model_is_ollamas_404(client):
    error = refused(lambda: client.chat(model="llama9:latest", messages=HELLO))
    assert (error.status_code, error.error) == (404, "model 'llama9:latest' not found")
    assert refused(lambda: client.show("llama9")).status_code == 404
    streamed = refused(lambda: list(client.chat(model="llama9", messages=HELLO, stream=True)))
    assert streamed.status_code == 404


@pytest.mark.parametrize(
    "asked, named",
    [
        ({"messages": [{**HELLO[0], "images": [b"\x89PNG"]}]}, "messages[0].images"),
        ({"options": {"temperature": "hot"}}, "options.temperature"),
        ({"options": {"top_p": 2}}, "options.top_p"),
        ({"options": {"typical_p": 0.5}}, "options.typical_p"),
        ({"options": {"num_ctx": 10 * N_CTX}}, "options.num_ctx"),
        ({"format": {"type": "object", "properties": 3}}, "format"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_field(client, asked, named):
    error = refused(lambda: client.chat(**{"model": "target", "messages": HELLO, **asked}))
    assert error.status_code == 400 and f"`{named}`" in error.error, error.error
    assert client.chat(model="target", messages=HELLO, options={"num_predict": 1}).done


def test_what_the_client_would_not_send_is_named_too(server):
    body = {"model": "target", "messages": HELLO, "format": "yaml", "stream": False}
    response = httpx.post(f"{server.url}/api/chat", json=body)
    assert response.status_code == 400 and "`format`" in response.json()["error"]
    body = {"model": "target", "prompt": "hi", "suffix": "there", "stream": False}
    response = httpx.post(f"{server.url}/api/generate", json=body)
    assert response.status_code == 400 and "`suffix`" in response.json()["error"]


def test_models_are_managed_by_specruns_commands(server, client):
    error = refused(lambda: client.pull("llama3"))
    assert error.status_code == 501 and "specrun models pull" in error.error
    deleted = httpx.request("DELETE", f"{server.url}/api/delete", json={"model": "target"})
    assert deleted.status_code == 501 and "specrun" in deleted.json()["error"]
