"""agent.llm: settings from config/env, the client, and one completion against the fake endpoint."""

from __future__ import annotations

import asyncio
import logging

import openai
import pytest

from agent.llm import (
    NOT_CONFIGURED_TEXT,
    ModelNotConfigured,
    ModelSettings,
    complete,
    describe_error,
    is_transient,
    make_client,
    retry_after,
)
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

SECRET = "sk-test-SECRET-123"


def settings_for(fake: FakeOpenAI, **kw) -> ModelSettings:
    return ModelSettings(base_url=fake.base_url, api_key=SECRET, name="fake-model", **kw)


# --- settings --------------------------------------------------------------------------------


def test_model_settings_from_config_and_env_fallbacks():
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1/", "OPENAI_API_KEY": "envkey", "CHINWAG_MODEL": "envmodel"}
    s = ModelSettings.from_config({}, env=env)
    assert (s.base_url, s.api_key, s.name) == ("http://127.0.0.1:9/v1", "envkey", "envmodel")
    s = ModelSettings.from_config(
        {"model": {"base_url": "http://127.0.0.1:1/v1", "name": "m", "timeout": "5", "context_window": 8000}},
        env=env,
    )
    assert (s.base_url, s.api_key, s.name, s.timeout, s.context_window) == (
        "http://127.0.0.1:1/v1",
        "envkey",
        "m",
        5.0,
        8000,
    )


def test_auxiliary_falls_back_to_model_field_by_field():
    config = {
        "model": {"base_url": "http://127.0.0.1:1/v1", "api_key": "mk", "name": "big"},
        "auxiliary": {"name": "small", "api_key": ""},
    }
    aux = ModelSettings.from_config(config, role="auxiliary", env={})
    assert (aux.base_url, aux.api_key, aux.name) == ("http://127.0.0.1:1/v1", "mk", "small")
    main = ModelSettings.from_config(config, env={})
    assert main.name == "big"


def test_not_configured_and_bad_values():
    s = ModelSettings.from_config(None, env={})
    assert not s.is_configured
    with pytest.raises(ModelNotConfigured) as err:
        make_client(s)
    assert str(err.value) == NOT_CONFIGURED_TEXT
    assert describe_error(err.value) == NOT_CONFIGURED_TEXT
    with pytest.raises(ValueError, match="model.timeout must be a number"):
        ModelSettings.from_config({"model": {"timeout": "soon"}}, env={})
    with pytest.raises(ValueError, match="positive"):
        ModelSettings.from_config({"model": {"context_window": 0}}, env={})
    with pytest.raises(ValueError, match="role"):
        ModelSettings.from_config({}, role="other", env={})


def test_key_never_in_repr_or_describe():
    s = ModelSettings(base_url="http://127.0.0.1:1/v1", api_key=SECRET, name="m")
    assert SECRET not in repr(s) and SECRET not in s.describe()
    assert "m @ http://127.0.0.1:1/v1" == s.describe()


def test_make_client_has_no_hidden_retries_and_our_timeout():
    client = make_client(ModelSettings(base_url="http://127.0.0.1:1/v1", api_key=None, timeout=7))
    assert client.max_retries == 0
    assert client.timeout == 7
    assert client.api_key  # placeholder so keyless local servers work


# --- completions against the fake -----------------------------------------------------------


async def test_complete_text_usage_and_request_shape(caplog):
    caplog.set_level(logging.DEBUG)
    async with FakeOpenAI() as fake:
        s = settings_for(fake, max_tokens=99)
        client = make_client(s)
        result = await complete(client, s, [{"role": "user", "content": "hi there"}], temperature=0.1)
        await client.close()
    assert result.text == "echo: hi there"
    assert result.finish_reason == "stop"
    assert result.prompt_tokens > 0 and result.completion_tokens > 0
    body = fake.requests[0]
    assert body["model"] == "fake-model" and body["temperature"] == 0.1 and body["max_tokens"] == 99
    assert "tools" not in body
    assert fake.headers[0]["Authorization"] == f"Bearer {SECRET}"
    assert SECRET not in caplog.text


async def test_complete_tool_calls_and_reasoning():
    tools = [
        {
            "type": "function",
            "function": {"name": "memory", "description": "d", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    async with FakeOpenAI() as fake:
        fake.push(
            Reply(tool_calls=[ToolCall("memory", {"action": "add"}, id="c1")], reasoning="thinking", usage=(11, 3))
        )
        s = settings_for(fake)
        client = make_client(s)
        result = await complete(client, s, [{"role": "user", "content": "x"}], tools=tools)
        await client.close()
    assert fake.requests[0]["tools"] == tools
    assert result.tool_calls == [
        {"id": "c1", "type": "function", "function": {"name": "memory", "arguments": '{"action": "add"}'}}
    ]
    assert result.message["reasoning"] == "thinking"
    assert (result.prompt_tokens, result.completion_tokens, result.finish_reason) == (11, 3, "tool_calls")


async def test_streaming_assembles_text_tool_calls_and_usage():
    async with FakeOpenAI() as fake:
        fake.push(
            Reply(text="hello streaming world", usage=(5, 4)),
            Reply(tool_calls=[ToolCall("a", {"x": 1}), ToolCall("b", {"y": "two"})]),
        )
        s = settings_for(fake)
        client = make_client(s)
        pieces: list[str] = []

        async def on_delta(piece: str) -> None:
            pieces.append(piece)

        first = await complete(client, s, [{"role": "user", "content": "x"}], on_delta=on_delta)
        second = await complete(client, s, [{"role": "user", "content": "y"}], on_delta=on_delta)
        await client.close()
    assert len(pieces) > 1 and "".join(pieces) == "hello streaming world"
    assert first.text == "hello streaming world" and (first.prompt_tokens, first.completion_tokens) == (5, 4)
    assert fake.requests[0]["stream"] is True
    names = [c["function"]["name"] for c in second.tool_calls]
    args = [c["function"]["arguments"] for c in second.tool_calls]
    assert names == ["a", "b"] and args == ['{"x": 1}', '{"y": "two"}']
    assert second.finish_reason == "tool_calls" and second.text == ""


# A conversation with every shape the agent sends: content parts, tool calls, tool results, reasoning.
RICH_HISTORY = [
    {"role": "system", "content": "You are chinwag."},
    {
        "role": "user",
        "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "memory", "arguments": '{"a": 1}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "saved"},
    {"role": "assistant", "content": "done", "reasoning": "because"},
    {"role": "user", "content": "thanks"},
]
RICH_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "memory",
            "description": "d",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        },
    }
]


@pytest.mark.parametrize("streamed", [False, True])
async def test_request_body_is_what_the_sdk_itself_would_send(streamed):
    """complete() hands its body to the SDK as extra_body (skipping the SDK's transform): the wire
    body must equal the one the SDK builds from the same arguments."""
    async with FakeOpenAI() as fake:
        s = settings_for(fake, max_tokens=50)
        client = make_client(s)

        async def on_delta(piece: str) -> None:
            pass

        await complete(
            client, s, RICH_HISTORY, tools=RICH_TOOLS, temperature=0.3, on_delta=on_delta if streamed else None
        )
        direct = {"model": "fake-model", "messages": RICH_HISTORY, "tools": RICH_TOOLS, "temperature": 0.3}
        direct["max_tokens"] = 50
        if streamed:
            async with client.chat.completions.with_streaming_response.create(
                **direct, stream=True, stream_options={"include_usage": True}
            ) as response:
                await response.read()
        else:
            await client.chat.completions.create(**direct)
        await client.close()
    ours, sdk = fake.requests
    assert ours == sdk
    assert ours["messages"] == RICH_HISTORY and ours["tools"] == RICH_TOOLS


@pytest.mark.parametrize(
    "status,kind,words",
    [
        (429, openai.RateLimitError, "rate-limiting"),
        (500, openai.InternalServerError, "(500): boom inside"),
        (401, openai.AuthenticationError, "refused the API key"),
    ],
)
async def test_errors_raise_once_without_hidden_retries(status, kind, words):
    async with FakeOpenAI() as fake:
        fake.push(Reply(status=status, error="boom inside", headers={"Retry-After": "3"}))
        s = settings_for(fake)
        client = make_client(s)
        with pytest.raises(kind) as err:
            await complete(client, s, [{"role": "user", "content": "x"}])
        await client.close()
    assert len(fake.requests) == 1  # max_retries=0: the SDK did not try again on its own
    assert words in describe_error(err.value)
    assert SECRET not in describe_error(err.value)
    assert is_transient(err.value) == (status != 401)
    assert retry_after(err.value) == 3.0


async def test_timeout_is_an_api_timeout_error():
    async with FakeOpenAI() as fake:
        fake.gate = asyncio.Event()  # never released: the reply never comes
        s = settings_for(fake, timeout=0.3)
        client = make_client(s)
        with pytest.raises(openai.APITimeoutError) as err:
            await complete(client, s, [{"role": "user", "content": "x"}])
        await client.close()
    assert describe_error(err.value) == "the model did not answer in time"
    assert not is_transient(err.value)


async def test_unreachable_endpoint_is_a_connection_error():
    async with FakeOpenAI() as fake:
        url = fake.base_url
    s = ModelSettings(base_url=url, api_key=None, timeout=2)  # server closed: nothing listens there
    client = make_client(s)
    with pytest.raises(openai.APIConnectionError) as err:
        await complete(client, s, [{"role": "user", "content": "x"}])
    await client.close()
    assert describe_error(err.value) == "could not reach the model service"
    assert is_transient(err.value)


async def test_fake_models_and_callable_script():
    async with FakeOpenAI(models=("m1", "m2")) as fake:
        fake.push(lambda body: f"model was {body['model']}")
        s = settings_for(fake)
        client = make_client(s)
        models = await client.models.list()
        result = await complete(client, s, [{"role": "user", "content": "x"}])
        await client.close()
    assert [m.id for m in models.data] == ["m1", "m2"]
    assert result.text == "model was fake-model"


async def test_missing_tool_call_ids_are_filled_in():
    async with FakeOpenAI() as fake:
        fake.push(Reply(tool_calls=[ToolCall("a", {}, id=""), ToolCall("b", {}, id="")]))
        s = settings_for(fake)
        client = make_client(s)
        result = await complete(client, s, [{"role": "user", "content": "x"}])
        await client.close()
    assert [c["id"] for c in result.tool_calls] == ["call_0", "call_1"]


# --- streaming: what can go wrong inside a stream ----------------------------------------------


async def stream_once(fake: FakeOpenAI, reply: Reply) -> tuple[list[str], BaseException | None, object]:
    """Stream one reply; the pieces seen, the exception raised (or None) and the Completion."""
    fake.push(reply)
    s = settings_for(fake, timeout=5)
    client = make_client(s)
    pieces: list[str] = []

    async def on_delta(piece: str) -> None:
        pieces.append(piece)

    try:
        result = await complete(client, s, [{"role": "user", "content": "x"}], on_delta=on_delta)
        return pieces, None, result
    except Exception as exc:
        return pieces, exc, None
    finally:
        await client.close()


async def test_an_error_event_mid_stream_is_a_clear_error_after_the_text_so_far():
    async with FakeOpenAI() as fake:
        pieces, exc, _ = await stream_once(fake, Reply(text="Half an answer", stream_error="the server overloaded"))
    assert "".join(pieces) == "Half an answer"  # what was written before the error reached the person
    assert isinstance(exc, openai.APIError) and exc.message == "the server overloaded"
    assert exc.body == {"message": "the server overloaded", "type": "server_error", "code": None}
    assert "the server overloaded" in describe_error(exc) and not is_transient(exc)


async def test_an_error_event_without_a_message_still_says_what_happened():
    async with FakeOpenAI() as fake:
        _, exc, _ = await stream_once(fake, Reply(text="Hi", stream_error={"error": {"code": "boom"}}))
    assert isinstance(exc, openai.APIError) and exc.message == "An error occurred during streaming"


async def test_a_dropped_stream_is_a_connection_error_worth_a_retry():
    async with FakeOpenAI() as fake:
        pieces, exc, _ = await stream_once(fake, Reply(text="Half an answer", stream_cut=True))
    assert isinstance(exc, openai.APIConnectionError) and is_transient(exc)
    assert "Half an answer".startswith("".join(pieces))
    assert describe_error(exc) == "the model service stopped answering midway (its connection dropped)"


async def test_a_stream_event_that_is_not_json_is_a_clear_error():
    raw = b'data: {"choices": [{"index": 0, "delta": {"content": "ok"}}]}\n\ndata: {not json\n\n'
    async with FakeOpenAI() as fake:
        pieces, exc, _ = await stream_once(fake, Reply(stream_raw=raw))
    assert pieces == ["ok"]
    assert isinstance(exc, openai.APIError) and "not JSON" in describe_error(exc)


async def test_the_event_stream_format_crlf_comments_multiline_data_reasoning_and_choices():
    def event(data: str) -> bytes:
        return b"".join(b"data: " + line.encode() + b"\r\n" for line in data.split("\n")) + b"\r\n"

    raw = b"".join(
        [
            b": keep-alive comment\r\n\r\n",
            b"event: message\r\nid: 1\r\n" + event('{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}'),
            event('{"choices": [{"index": 0, "delta": {"reasoning_content": "think"}}]}'),
            event('{"choices": [{"index": 0, "delta": {"content": "h\\u00e9llo "}}]}'),
            event('{"choices": [{"index": 1, "delta": {"content": "other choice"}}]}'),
            event('{"choices":\n [{"index": 0, "delta": {"content": "world"}, "finish_reason": "stop"}]}'),
            event('{"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}'),
            b"data: [DONE]\r\n\r\n",
        ]
    )
    async with FakeOpenAI() as fake:
        pieces, exc, result = await stream_once(fake, Reply(stream_raw=raw))
    assert exc is None and "".join(pieces) == "héllo world"
    assert result.text == "héllo world" and result.message["reasoning"] == "think"  # type: ignore[attr-defined]
    assert (result.prompt_tokens, result.completion_tokens, result.finish_reason) == (7, 2, "stop")  # type: ignore[attr-defined]


async def test_streamed_calls_reuse_one_connection():
    async with FakeOpenAI() as fake:
        fake.push("one answer", "another answer")
        s = settings_for(fake)
        client = make_client(s)

        async def on_delta(piece: str) -> None:
            pass

        for _ in range(2):
            await complete(client, s, [{"role": "user", "content": "x"}], on_delta=on_delta)
        await client.close()
    assert fake.peers[0] == fake.peers[1]  # the body was read to its end: the connection went back to the pool


async def test_a_server_that_ignores_stream_and_answers_json_is_understood():
    async with FakeOpenAI() as fake:
        pieces, exc, result = await stream_once(fake, Reply(text="all at once", ignore_stream=True, usage=(3, 2)))
    assert exc is None and pieces == ["all at once"] and fake.requests[0]["stream"] is True
    assert result.text == "all at once" and (result.prompt_tokens, result.completion_tokens) == (3, 2)  # type: ignore[attr-defined]
