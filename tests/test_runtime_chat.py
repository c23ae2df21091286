"""The chat client against loopback servers speaking the Ollama and OpenAI wire formats."""

import json

import pytest

from memvault.indexer.services.chat import HttpChatModel, chat_model_from_config
from memvault.vault.config import load_config
from memvault.vault.errors import ProviderUnavailable
from tests.loopback import LoopbackServer, Reply, closed_port_url, ndjson

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo"}]


def ollama(content):
    return (200, {"model": "m", "message": {"role": "assistant", "content": content}, "done": True})


def openai(content):
    return (200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})


def test_ollama_request_shape_and_answer():
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: ollama('{"ok": true}'))
        model = HttpChatModel("ollama", server.url, "qwen3:8b", timeout_ms=5000)
        assert model.complete(MESSAGES, response_format_json=True) == '{"ok": true}'
        sent = server.requests_to("/api/chat")[0].json
    # every call is bounded (8,192 tokens without a capture OutputSpec); JSON mode stops at a run of blank lines
    assert sent == {"model": "qwen3:8b", "messages": MESSAGES, "stream": True,
                    "options": {"temperature": 0, "num_predict": 8192, "stop": ["\n\n\n"]},
                    "format": "json"}  # fmt: skip


def test_openai_request_shape_key_header_and_v1_path():
    with LoopbackServer() as server:
        server.route("/v1/chat/completions", lambda body: openai("plain text"))
        for endpoint in (server.url, server.url + "/v1", server.url + "/v1/"):
            model = HttpChatModel("openai", endpoint, "gpt-x", api_key="sk-test-key")
            assert model.complete(MESSAGES, response_format_json=False) == "plain text"
        request = server.requests_to("/v1/chat/completions")[0]
    assert request.headers["authorization"] == "Bearer sk-test-key"
    assert "response_format" not in request.json and request.json["temperature"] == 0
    assert "sk-test-key" not in repr(model)


def test_json_mode_for_openai_asks_for_a_json_object():
    with LoopbackServer() as server:
        server.route("/v1/chat/completions", lambda body: openai("{}"))
        HttpChatModel("openai", server.url, "m").complete(MESSAGES, response_format_json=True)
        assert server.requests[0].json["response_format"] == {"type": "json_object"}


def test_a_completion_over_the_character_cap_is_refused_before_parsing():
    exact = "é" * 262_144  # the spec's cap, in JavaScript characters (é is one)
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: ollama(exact))
        model = HttpChatModel("ollama", server.url, "m")
        assert len(model.complete(MESSAGES, response_format_json=False)) == 262_144
        server.route("/api/chat", lambda body: ollama(exact + "x"))
        with pytest.raises(ProviderUnavailable, match="262144"):
            model.complete(MESSAGES, response_format_json=False)


@pytest.mark.parametrize(
    "reply, problem",
    [
        (Reply(500, "model crashed"), "HTTP 500"),
        (Reply(404, {"error": "model not found"}), "ollama pull"),
        (Reply(200, b"not json"), "malformed JSON"),
        (Reply(200, {"message": {"content": 42}}), "message.content"),
        (Reply(200, {"error": "out of memory"}), "out of memory"),
        (Reply(200, [1, 2]), "message.content"),
        (Reply(200, chunks=ndjson([{"message": {"content": "a"}}, {"message": {"content": "b"}}])), "ended before"),
        (Reply(302, b"", {"Location": "http://example.com/"}), "redirects are not followed"),
    ],
)
def test_server_failures_become_provider_unavailable(reply, problem):
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: reply)
        with pytest.raises(ProviderUnavailable, match=problem):
            HttpChatModel("ollama", server.url, "m").complete(MESSAGES, response_format_json=False)


@pytest.mark.parametrize("answer", [{}, {"choices": []}, {"choices": [{"message": {}}]}, {"choices": ["x"]}])
def test_malformed_openai_answers_are_refused(answer):
    with LoopbackServer() as server:
        server.route("/v1/chat/completions", lambda body: (200, answer))
        with pytest.raises(ProviderUnavailable):
            HttpChatModel("openai", server.url, "m").complete(MESSAGES, response_format_json=False)


def test_the_per_call_timeout_applies():
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: ollama("late"), delay=3.0)
        with pytest.raises(ProviderUnavailable, match="within 0.3 s"):
            HttpChatModel("ollama", server.url, "m", timeout_ms=300).complete(MESSAGES, response_format_json=False)


def test_connection_refused_names_the_fix():
    with pytest.raises(ProviderUnavailable, match="connection refused"):
        HttpChatModel("ollama", closed_port_url(), "m").complete(MESSAGES, response_format_json=False)


@pytest.mark.parametrize("messages", [[], [{"role": "tool", "content": "x"}], [{"role": "user", "content": 1}], ["hi"]])
def test_malformed_messages_are_refused_before_any_request(messages):
    with pytest.raises(ProviderUnavailable):
        HttpChatModel("ollama", closed_port_url(), "m").complete(messages, response_format_json=False)


def test_model_from_config_uses_timeout_and_the_named_key_variable(new_vault):
    config_data = {"memory": {"mode": "bujo", "embeddings": {"provider": "builtin"},
                              "llm": {"provider": "openai", "model": "gpt-x", "endpoint": "http://127.0.0.1:9/v1",
                                      "timeoutMs": 1234, "apiKeyEnv": "CHAT_KEY"}}}  # fmt: skip
    (new_vault / "memvault.json").write_text(json.dumps(config_data))
    config = load_config(new_vault, {})
    model = chat_model_from_config(config, {"CHAT_KEY": "sk-abc"})
    assert (model.provider, model.model, model.timeout_s, model.url) == (
        "openai",
        "gpt-x",
        1.234,
        "http://127.0.0.1:9/v1/chat/completions",
    )
    with pytest.raises(ProviderUnavailable, match="CHAT_KEY"):
        chat_model_from_config(config, {})
    (new_vault / "memvault.json").write_text(json.dumps({"memory": {"mode": "lite"}}))
    assert chat_model_from_config(load_config(new_vault, {}), {}) is None  # no llm block: no model


# --- streamed answers (indexer/services/chat_stream.py) --------------------------------------------


def sse(events) -> list[bytes]:
    """An OpenAI-compatible server's stream: one `data:` event per chunk, then [DONE]."""
    return [f"data: {json.dumps(event)}\n\n".encode() for event in events] + [b"data: [DONE]\n\n"]


def delta(text, finish=None):
    return {"id": "c-1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": text} if text is not None else {},
                         "finish_reason": finish}]}  # fmt: skip


def test_streamed_answers_are_assembled_for_both_wire_formats():
    with LoopbackServer() as server:
        server.route("/v1/chat/completions", lambda body: Reply(
            200, chunks=[b": keep-alive\n\n",
                         *sse([delta(None), delta('{"me'), delta('mories": []}'), delta(None, "stop")])],
            headers={"Content-Type": "text/event-stream"}))  # fmt: skip
        server.route("/api/chat", lambda body: Reply(200, chunks=ndjson([
            {"message": {"role": "assistant", "content": '{"a"'}, "done": False},
            {"message": {"role": "assistant", "content": ": 1}"}, "done": False},
            {"message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop"}])))  # fmt: skip
        assert (
            HttpChatModel("openai", server.url, "m").complete(MESSAGES, response_format_json=True) == '{"memories": []}'
        )
        assert HttpChatModel("ollama", server.url, "m").complete(MESSAGES, response_format_json=True) == '{"a": 1}'
        assert all(r.json["stream"] is True for r in server.requests)


def test_a_stream_cut_at_the_token_cap_is_an_invalid_output_never_a_partial():
    from memvault.indexer.services.chat import CompletionCutOff

    with LoopbackServer() as server:
        server.route(
            "/v1/chat/completions",
            lambda body: Reply(200, chunks=sse([delta('{"memories": [{"te'), delta(None, "length")])),
        )
        server.route("/api/chat", lambda body: Reply(200, chunks=ndjson([
            {"message": {"content": '{"memo'}, "done": False},
            {"message": {"content": ""}, "done": True, "done_reason": "length"}])))  # fmt: skip
        for provider in ("openai", "ollama"):
            with pytest.raises(CompletionCutOff, match="length"):
                HttpChatModel(provider, server.url, "m").complete(MESSAGES, response_format_json=True)


def test_a_stream_that_ends_early_or_carries_an_error_is_provider_unavailable():
    with LoopbackServer() as server:
        server.route(
            "/v1/chat/completions", lambda body: Reply(200, chunks=[f"data: {json.dumps(delta('{'))}\n\n".encode()])
        )
        with pytest.raises(ProviderUnavailable, match="ended before its last event"):
            HttpChatModel("openai", server.url, "m").complete(MESSAGES, response_format_json=False)
        server.route(
            "/v1/chat/completions", lambda body: Reply(200, chunks=sse([{"error": {"message": "context full"}}]))
        )
        with pytest.raises(ProviderUnavailable, match="context full"):
            HttpChatModel("openai", server.url, "m").complete(MESSAGES, response_format_json=False)


class CountingChunks:
    """A slow stream of many chunks that counts how many the server got to send."""

    def __init__(self, total: int):
        self.total, self.sent, self.stopped = total, 0, False

    def __iter__(self):
        try:
            for n in range(self.total):
                self.sent = n + 1
                yield f"data: {json.dumps(delta('x'))}\n\n".encode()
        finally:  # the handler stopped iterating: its write failed, or every chunk was sent
            self.stopped = True


def test_at_the_deadline_the_client_hangs_up_and_the_server_stops_streaming():
    """The timeout ends the work, not just the wait: the server's next writes fail, so a streaming
    model server stops generating instead of running on to its token cap."""
    chunks = CountingChunks(2000)
    with LoopbackServer() as server:
        server.route("/v1/chat/completions", lambda body: Reply(200, chunks=chunks, chunk_delay=0.02))
        with pytest.raises(ProviderUnavailable, match="within 0.5 s"):
            HttpChatModel("openai", server.url, "m", timeout_ms=500).complete(MESSAGES, response_format_json=False)
        from tests.engine_helpers import wait_for

        wait_for(lambda: chunks.stopped, what="the server to stop streaming")  # the server still runs
        assert chunks.sent < chunks.total  # 2,000 chunks take 40 s to send: the hang-up ended it long before
