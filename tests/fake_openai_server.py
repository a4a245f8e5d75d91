"""A deliberately misbehaving OpenAI-compatible server, for testing the harness's fault handling.

Takes vLLM's server flags (ignored) plus --behavior: ok | fail-start | die-after | hang | hang-after | refuse
(die-after and hang-after: answer --after requests first).
"""

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--served-model-name", default="fake")
parser.add_argument("--behavior", default="ok", choices=["ok", "fail-start", "die-after", "hang", "hang-after", "refuse"])
parser.add_argument("--after", type=int, default=3)
args, _unknown = parser.parse_known_args()

if args.behavior == "fail-start":
    print("fake server: cannot load model weights (deliberate)", flush=True)
    sys.exit(3)

served = 0


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *_args):
        return

    def _send(self, code, body, kind="application/json"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, "")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": args.served_model_name}]}))
        elif self.path == "/metrics":
            self._send(200, "# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total 1.0\n", "text/plain")
        else:
            self._send(404, "{}")

    def do_POST(self):
        global served
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/reset_prefix_cache":  # as vLLM's: answered at once, not one of the requests counted
            return self._send(200, "")
        served += 1
        if args.behavior == "die-after" and served > args.after:
            time.sleep(0.5)  # the answers already being written finish first, however busy the machine
            os._exit(1)
        if args.behavior == "refuse":  # as vLLM answers a max_tokens beyond the context
            message = "max_tokens is too large: 100000000. This model's maximum context length is 1024 tokens."
            return self._send(400, json.dumps({"error": {"message": message, "type": "BadRequestError", "code": 400}}))
        if args.behavior == "hang" or (args.behavior == "hang-after" and served > args.after):
            time.sleep(3600)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = ['{"order_id":', '"A1"}']
        for piece in chunks:
            event = {"choices": [{"delta": {"content": piece}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(f"data: {json.dumps({'choices': [{'delta': {}, 'finish_reason': 'stop'}]})}\n\n".encode())
        usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
