"""Turn settings and seat specs (``--seat critic=scripted:always-correct``) into policies."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import Engine

from app.settings import Settings, load_settings
from graphs.games import GameSpec
from graphs.policies.base import Backend, SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.scripted import BOTS

SEAT_SPEC_HELP = (
    "SEAT=SPEC, repeatable. SPEC: model, model:base, model:ROLE@vN, openai:MODEL, scripted:BOT or "
    "verifier (README: Games)."
)
SEAT_SPEC_DETAILS = (
    "SPEC is 'model' (the configured base model with the seat's active adapter, "
    "if its role has one; served in-process or by vLLM, per SPARRING_BACKEND), 'model:base' (no adapter), "
    "'model:ROLE@vN' (a registered adapter version), 'openai:MODEL' (a model of the OpenAI-compatible API at "
    "SPARRING_OPENAI_BASE_URL, e.g. openai:gpt-4o-mini), 'scripted:BOT' (a rule-based bot: echo, calculator, "
    "always-correct, always-incorrect, stubborn) or 'verifier' (judge seats: check the ground truth, no model "
    "call). SPARRING_SEATS='{\"critic\": \"openai:gpt-4o-mini\"}' sets defaults that --seat overrides."
)


class SeatSpecError(ValueError):
    pass


def parse_seat_specs(game: GameSpec, specs: list[str], defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each seat's spec: the user's ``--seat`` choice, else ``defaults`` (the SPARRING_SEATS
    setting unless given; seats the game lacks or that take no policy are ignored there, as the
    setting serves every game), else the seat's default."""
    chosen = {s.name: s.default_policy for s in game.seats}
    if defaults is None:
        defaults = load_settings().seats
    for seat, spec in defaults.items():
        if seat in chosen and game.seat(seat).takes_policy:
            chosen[seat] = _checked(game, seat, spec, f"SPARRING_SEATS {seat!r}")
    for item in specs:
        seat, sep, spec = item.partition("=")
        if not sep or not spec:
            raise SeatSpecError(f"--seat {item!r}: expected SEAT=SPEC, e.g. critic=scripted:always-correct")
        if seat not in chosen:
            raise SeatSpecError(
                f"--seat {item!r}: game {game.name!r} has no seat {seat!r}; its seats: {', '.join(chosen)}"
            )
        chosen[seat] = _checked(game, seat, spec, f"--seat {item!r}")
    return chosen


def _checked(game: GameSpec, seat: str, spec: str, where: str) -> str:
    if spec == "verifier" and game.seat(seat).kind != "judge":
        raise SeatSpecError(f"{where}: only judge seats can be 'verifier'")
    if spec != "verifier" and not game.seat(seat).takes_policy:
        raise SeatSpecError(
            f"{where}: the {seat} seat of {game.name} is a rule verifier (it checks the ground truth and makes "
            f"no model call), so it cannot take a policy; leave --seat {seat}=... out"
        )
    if spec not in ("model", "verifier") and not spec.startswith(("scripted:", "model:", "openai:")):
        raise SeatSpecError(f"{where}: unknown policy {spec!r}. {SEAT_SPEC_DETAILS}")
    if spec.startswith("scripted:") and spec.removeprefix("scripted:") not in BOTS:
        raise SeatSpecError(f"{where}: unknown scripted bot; built-in bots: {', '.join(BOTS)}")
    if spec == "openai:":
        raise SeatSpecError(f"{where}: name the model, e.g. openai:gpt-4o-mini")
    return spec


@dataclass
class PolicyFactory:
    """Builds policies, sharing one backend for the base model between seats.

    A seat given 'model' plays with the active adapter of the role of the same name, if the
    registry has one, so games after a deploy are played by the improved agents. The base
    model is served in-process or by a vLLM server (SPARRING_BACKEND); adapters are resolved
    from the registry either way and loaded into the backend by their folder's path.
    """

    settings: Settings
    sampling: SamplingParams
    engine: Engine | None = None
    """The store holding the adapter registry (None: never use adapters)."""
    backends: list[Backend] = field(default_factory=list)
    _model: Backend | None = None
    _hosted: dict[str, Backend] = field(default_factory=dict)

    def model_backend(self) -> Backend:
        if self._model is None:
            if self.settings.backend == "vllm":
                self._model = self._openai(self.settings.vllm_url, self.settings.served_model, "EMPTY", vllm=True)
            else:
                from graphs.policies.inprocess import InProcessBackend

                self._model = InProcessBackend.from_pretrained(
                    self.settings.model,
                    cache_dir=self.settings.cache_dir,
                    device=self.settings.device,
                    max_batch_size=self.settings.max_batch_size,
                )
            self.backends.append(self._model)
        return self._model

    def hosted_backend(self, model: str) -> Backend:
        """The OpenAI-compatible API of the settings, serving ``model`` (one backend per model)."""
        if model not in self._hosted:
            key = self.settings.openai_api_key
            api_key = key.get_secret_value() if key else os.environ.get("OPENAI_API_KEY", "EMPTY")
            self._hosted[model] = self._openai(self.settings.openai_base_url, model, api_key, vllm=False)
            self.backends.append(self._hosted[model])
        return self._hosted[model]

    def _openai(self, base_url: str, model: str, api_key: str, *, vllm: bool) -> Backend:
        from graphs.policies.openai_backend import OpenAIBackend, RetryPolicy

        return OpenAIBackend(
            base_url=base_url,
            model_name=model,
            api_key=api_key,
            vllm=vllm,
            timeout_s=self.settings.request_timeout_s,
            retry=RetryPolicy(retries=self.settings.request_retries),
            send_seeds=self.settings.request_seeds,
        )

    async def policy(self, seat: str, spec: str) -> Policy:
        if spec.startswith("scripted:"):
            from graphs.policies.scripted import scripted_bot

            backend = scripted_bot(spec.removeprefix("scripted:"))
            self.backends.append(backend)
            return Policy(backend, self.sampling)
        if spec.startswith("openai:"):
            return Policy(self.hosted_backend(spec.removeprefix("openai:")), self.sampling)
        adapter = await self._adapter(seat, spec.removeprefix("model").removeprefix(":") or None)
        return Policy(self.model_backend(), self.sampling, adapter=adapter)

    async def _adapter(self, seat: str, choice: str | None) -> str | None:
        """Load the adapter a seat plays with (its role's active one for a plain 'model')."""
        if choice == "base" or self.engine is None:
            return None
        from training.adapter_files import verify_folder
        from training.registry import active_version, get_version

        record = get_version(self.engine, choice) if choice else active_version(self.engine, seat)
        if record is None:
            return None
        verify_folder(record.path, base_model=self.settings.model, status=record.status)
        backend = self.model_backend()
        if record.name not in backend.adapters():
            await backend.load_adapter(record.name, str(record.path))
        return record.name

    async def policies(self, specs: dict[str, str]) -> dict[str, Policy]:
        return {seat: await self.policy(seat, spec) for seat, spec in specs.items() if spec != "verifier"}

    async def aclose(self) -> None:
        for backend in self.backends:
            await backend.aclose()
