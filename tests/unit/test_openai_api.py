import itertools

from dspark_bench.loadtests.openai_api import chat_body, consume_sse
from dspark_bench.scenarios import Mode, load_scenario


def test_consume_sse_times_text_and_usage():
    clock = itertools.count(1.0)
    lines = [
        'data: {"choices":[{"delta":{"role":"assistant"}}]}',
        "",
        'data: {"choices":[{"delta":{"content":"{\\"a\\""}}]}',
        'data: {"choices":[{"delta":{"content":":1}"},"finish_reason":"stop"}]}',
        'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4}}',
        "data: [DONE]",
    ]
    result = consume_sse(lines, lambda: next(clock))
    assert result.text == '{"a":1}'
    assert result.t_first_token == 3.0  # the first chunk with content, not the role chunk
    assert result.finish_reason == "stop"
    assert (result.prompt_tokens, result.output_tokens) == (7, 4)
    assert result.error is None


def test_stream_error_and_cut_stream():
    assert consume_sse(['data: {"error":{"message":"bad schema"}}'], lambda: 0.0).error == "bad schema"
    assert "finish_reason" in consume_sse(['data: {"choices":[{"delta":{"content":"x"}}]}'], lambda: 0.0).error


def test_chat_body_never_ignores_eos_and_asks_for_usage():
    sample = load_scenario("order_extraction").sample(1_000_000)
    body = chat_body(sample, Mode.PROMPT, "m", 512, 0.0)
    assert "response_format" not in body and "ignore_eos" not in body
    assert body["stream_options"] == {"include_usage": True}
    assert chat_body(sample, Mode.JSON_OBJECT, "m", 512, 0.0)["response_format"] == {"type": "json_object"}
