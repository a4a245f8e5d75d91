"""A fast OpenAI-compatible streaming server (asyncio, HTTP/1.1 keep-alive, chunked SSE): a token every
--token-ms milliseconds, --tokens per answer (always the JSON object {"a": 1, "b": "xy"}), its prompt tokens
the number of messages sent, all but one of them "cached". Nothing like a model: a load generator's test bench, where
the server is never the bottleneck, so any shortfall in concurrency is the client's.

    python tests/fake_stream_server.py --port 8123 [--tokens 10] [--token-ms 20] [--slots N] [--long-every K --long-tokens M]

With ``--slots N`` it writes at most N answers at once and queues the rest: a server with a capacity. With
``--long-every K`` every K-th answer has ``--long-tokens`` tokens: lengths as varied as a model's. With
``--record FILE`` each chat request's body is appended to FILE: what a client put on the wire.
"""

import argparse
import asyncio
import json

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--tokens", type=int, default=10)
parser.add_argument("--token-ms", type=float, default=20.0)
parser.add_argument("--slots", type=int, default=0, help="answers written at once, the rest queued (0: no limit)")
parser.add_argument("--long-every", type=int, default=0, help="every K-th answer is long (0: none)")
parser.add_argument("--long-tokens", type=int, default=100, help="tokens of a long answer")
parser.add_argument("--record", help="append each chat request's JSON body to this file, a line each")
args = parser.parse_args()
SLOTS = asyncio.Semaphore(args.slots) if args.slots else None


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(payload: dict) -> bytes:
    return chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")


ANSWERS = [0]  # chat answers begun: every --long-every-th is long


async def answer(writer: asyncio.StreamWriter, request: dict) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    pieces = ['{"a":', " 1", ",", ' "b":', ' "x', 'y"', "}"]
    ANSWERS[0] += 1
    tokens = args.long_tokens if args.long_every and ANSWERS[0] % args.long_every == 0 else args.tokens
    for index in range(tokens):
        await asyncio.sleep(args.token_ms / 1000)
        text = pieces[index] if index < len(pieces) else ""
        writer.write(event({"choices": [{"index": 0, "delta": {"content": text or " "}, "finish_reason": None}]}))
        await writer.drain()
    writer.write(event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    # prompt tokens: the request's messages, so a test sees a conversation grow; all but the last cached
    messages = len(request.get("messages", [])) or 5
    usage = {"prompt_tokens": messages, "completion_tokens": tokens, "prompt_tokens_details": {"cached_tokens": messages - 1}}
    writer.write(event({"choices": [], "usage": usage}))
    writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


CONNECTIONS = [0]  # accepted so far: a client that reuses its connections opens one per user
RESETS = [0]  # POST /reset_prefix_cache calls, as vLLM serves it in dev mode
BETWEEN_RESETS = [0]  # chat requests before the first reset, then after each


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    CONNECTIONS[0] += 1
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            request = json.loads(await reader.readexactly(length)) if length else {}
            path = head.split(b" ", 2)[1]
            if path == b"/v1/chat/completions":
                BETWEEN_RESETS[-1] += 1
                if args.record:
                    with open(args.record, "a") as record:
                        record.write(json.dumps(request) + "\n")
            if path == b"/v1/chat/completions" and SLOTS is not None:
                async with SLOTS:
                    await answer(writer, request)
            elif path == b"/v1/chat/completions":
                await answer(writer, request)
            else:
                body = b""
                if path == b"/v1/models":
                    body = json.dumps({"data": [{"id": "fake"}], "connections": CONNECTIONS[0], "resets": RESETS[0],
                                       "between_resets": BETWEEN_RESETS}).encode()  # fmt: skip
                elif path == b"/reset_prefix_cache":
                    RESETS[0] += 1
                    BETWEEN_RESETS.append(0)
                    body = b'{"success": true}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", args.port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
