import itertools

from dspark_bench.loadtests.openai_api import RequestSettings, consume_sse, error_message
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


def test_the_body_never_ignores_eos_and_asks_for_usage():
    sample = load_scenario("order_extraction").sample(1_000_000)
    body = RequestSettings("m", Mode.PROMPT).body(sample)
    assert "response_format" not in body and "ignore_eos" not in body and "top_p" not in body
    assert body["stream_options"] == {"include_usage": True}
    assert RequestSettings("m", Mode.JSON_OBJECT).body(sample)["response_format"] == {"type": "json_object"}
    assert "stream" not in RequestSettings("m", Mode.JSON_OBJECT).body(sample, stream=False)


def test_a_lines_own_max_tokens_wins():
    from dataclasses import replace

    sample = replace(load_scenario("order_extraction").sample(1), max_tokens=40)
    assert RequestSettings("m", Mode.JSON_OBJECT, max_tokens=512).body(sample)["max_tokens"] == 40


def test_error_message_reads_the_openai_error_object():
    assert error_message(400, '{"error": {"message": "max_tokens is  too large"}}') == "HTTP 400: max_tokens is too large"
    assert error_message(502, "<html>bad gateway</html>") == "HTTP 502: <html>bad gateway</html>"
