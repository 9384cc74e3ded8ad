"""A stand-in for a vLLM server's OpenAI API on 127.0.0.1, for retry, restart and error tests.

It answers in the shapes that vLLM 0.32 gives (checked against a real server in
tests/test_vllm.py): ``token_ids``/``stop_reason`` on the choice and ``prompt_token_ids`` on
the response when ``return_token_ids`` is asked for, errors as ``{"error": {"message", "type",
"code"}}``, the runtime LoRA endpoints, and LoRA adapters in /v1/models with ``parent``/``root``.
A guided choice (``structured_outputs.choice``) answers the option at index ``choose``, one
token id per word.
Stopping it and starting another on the same port is a server restart: adapters are forgotten.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from uvicorn_thread import free_port

EOS = 2
BASE = "bundled"
PROMPT_IDS = (1, 2, 3)
"""The ids of every chat prompt (its prompt_token_ids)."""


class VllmDouble:
    """``failures``: statuses the next chat requests are answered with, in order (then normal
    answers). ``answer_model``: what responses name as their model (default: the one asked for)."""

    def __init__(self, port: int | None = None, *, base: str = BASE, reply: str = "Answer: 5") -> None:
        self.port = port or free_port()
        self.base = base
        self.reply = reply
        self.failures: list[int] = []
        self.answer_model: str | None = None
        self.choose = 0
        self.loras: dict[str, str] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> VllmDouble:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.loras.clear()

    # ---------------------------------------------------------------------- answers

    def models(self) -> tuple[int, Any]:
        cards = [{"id": self.base, "object": "model", "root": f"/models/{self.base}", "parent": None}]
        cards += [{"id": n, "object": "model", "root": p, "parent": self.base} for n, p in self.loras.items()]
        return 200, {"object": "list", "data": cards}

    def chat(self, body: dict[str, Any]) -> tuple[int, Any]:
        if self.failures:
            status = self.failures.pop(0)
            return status, _error(f"injected failure {status}", "InternalServerError", status)
        model = body["model"]
        if model != self.base and model not in self.loras:
            return 404, _error(f"The model `{model}` does not exist. Valid aliases: {self.base}.", "NotFoundError", 404)
        reply = self.reply
        options = (body.get("structured_outputs") or {}).get("choice")
        if options is not None:
            reply = options[self.choose]  # the option a guided choice picks (``choose``: its index)
        ids = [100 + i for i in range(len(reply.split()))] + [EOS]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": reply},
            "logprobs": {"content": [{"token": str(t), "logprob": -0.5, "top_logprobs": []} for t in ids]},
            "finish_reason": "stop",
        }
        response: dict[str, Any] = {
            "id": "chatcmpl-double",
            "object": "chat.completion",
            "created": 0,
            "model": self.answer_model or model,
            "choices": [choice],
        }
        if body.get("return_token_ids"):
            choice.update(token_ids=ids, stop_reason=None)
            response["prompt_token_ids"] = list(PROMPT_IDS)
        return 200, response

    def load(self, body: dict[str, Any]) -> tuple[int, Any]:
        name, path = body["lora_name"], body["lora_path"]
        if name in self.loras:
            message = f"The lora adapter '{name}' has already been loaded. If you want to load the adapter in place, "
            return 400, _error(message + "set 'load_inplace' to True.", "InvalidUserInput", 400)
        if not Path(path).is_dir():
            return 404, _error(f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError", 404)
        self.loras[name] = path
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, body: dict[str, Any]) -> tuple[int, Any]:
        if self.loras.pop(body["lora_name"], None) is None:
            return 404, _error(f"The lora adapter '{body['lora_name']}' cannot be found.", "NotFoundError", 404)
        return 200, f"Success: LoRA adapter '{body['lora_name']}' removed successfully."


def _error(message: str, kind: str, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _handler(double: VllmDouble) -> type[BaseHTTPRequestHandler]:
    posts = {
        "/v1/chat/completions": "chat",
        "/v1/load_lora_adapter": "load",
        "/v1/unload_lora_adapter": "unload",
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            double.requests.append((self.path, {}))
            self._send(*double.models()) if self.path == "/v1/models" else self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            double.requests.append((self.path, body))
            answer = posts.get(self.path)  # looked up now, so that a test may replace an answer
            self._send(*getattr(double, answer)(body)) if answer else self._send(404, {"detail": "Not Found"})

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler
