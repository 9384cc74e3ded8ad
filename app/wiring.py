"""Turn settings and seat specs (``--seat critic=scripted:always-correct``) into policies."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine

from app.settings import Settings
from graphs.games import GameSpec
from graphs.policies.base import Backend, SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.scripted import BOTS

SEAT_SPEC_HELP = (
    "SEAT=SPEC, repeatable. SPEC is 'model' (the configured base model with the seat's active adapter, "
    "if its role has one), 'model:base' (no adapter), 'model:ROLE@vN' (a registered adapter version), "
    "'scripted:BOT' (a rule-based bot: echo, calculator, always-correct, always-incorrect, stubborn) or "
    "'verifier' (judge seats: check the ground truth, no model call)."
)


class SeatSpecError(ValueError):
    pass


def parse_seat_specs(game: GameSpec, specs: list[str]) -> dict[str, str]:
    """Each seat's spec: the user's choice, else the seat's default."""
    chosen = {s.name: s.default_policy for s in game.seats}
    for item in specs:
        seat, sep, spec = item.partition("=")
        if not sep or not spec:
            raise SeatSpecError(f"--seat {item!r}: expected SEAT=SPEC, e.g. critic=scripted:always-correct")
        if seat not in chosen:
            raise SeatSpecError(
                f"--seat {item!r}: game {game.name!r} has no seat {seat!r}; its seats: {', '.join(chosen)}"
            )
        if spec == "verifier" and game.seat(seat).kind != "judge":
            raise SeatSpecError(f"--seat {item!r}: only judge seats can be 'verifier'")
        if spec not in ("model", "verifier") and not spec.startswith(("scripted:", "model:")):
            raise SeatSpecError(f"--seat {item!r}: unknown policy {spec!r}. {SEAT_SPEC_HELP}")
        if spec.startswith("scripted:") and spec.removeprefix("scripted:") not in BOTS:
            raise SeatSpecError(f"--seat {item!r}: unknown scripted bot; built-in bots: {', '.join(BOTS)}")
        chosen[seat] = spec
    return chosen


@dataclass
class PolicyFactory:
    """Builds policies, sharing one in-process backend (one base model) between seats.

    A seat given 'model' plays with the active adapter of the role of the same name, if the
    registry has one, so games after a deploy are played by the improved agents.
    """

    settings: Settings
    sampling: SamplingParams
    engine: Engine | None = None
    """The store holding the adapter registry (None: never use adapters)."""
    backends: list[Backend] = field(default_factory=list)
    _model: Backend | None = None

    def model_backend(self) -> Backend:
        if self._model is None:
            from graphs.policies.inprocess import InProcessBackend

            self._model = InProcessBackend.from_pretrained(
                self.settings.model,
                cache_dir=self.settings.cache_dir,
                device=self.settings.device,
                max_batch_size=self.settings.max_batch_size,
            )
            self.backends.append(self._model)
        return self._model

    async def policy(self, seat: str, spec: str) -> Policy:
        if spec.startswith("scripted:"):
            from graphs.policies.scripted import scripted_bot

            backend = scripted_bot(spec.removeprefix("scripted:"))
            self.backends.append(backend)
            return Policy(backend, self.sampling)
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
        verify_folder(record.path, base_model=self.settings.model)
        backend = self.model_backend()
        if record.name not in backend.adapters():
            await backend.load_adapter(record.name, str(record.path))
        return record.name

    async def policies(self, specs: dict[str, str]) -> dict[str, Policy]:
        return {seat: await self.policy(seat, spec) for seat, spec in specs.items() if spec != "verifier"}

    async def aclose(self) -> None:
        for backend in self.backends:
            await backend.aclose()
