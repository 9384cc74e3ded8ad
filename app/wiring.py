"""Turn settings and seat specs (``--seat critic=scripted:always-correct``) into policies."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from app.seat_pools.spec import DrawSpecError, parse_draw
from app.settings import Settings, load_settings
from graphs.options import GameOptions, describe
from graphs.policies.base import Backend, SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.verifier import verifier_name
from graphs.registry import GameSpec, judge_prompt_readers, known_bots
from graphs.seats import RULES, is_rules

if TYPE_CHECKING:
    from graphs.policies.deciding import FloatTwins
    from graphs.policies.inprocess import InProcessBackend

SEAT_SPEC_HELP = (
    "SEAT=SPEC, repeatable. SPEC: model, model:base, model:ROLE@vN, model:PATH_OR_ID, openai:MODEL, "
    "scripted:BOT, rules (verifier, the old name of rules, is still accepted) or verifier:ROLE@vN; several, "
    "one per episode: "
    "pool:ROLE[/MODE] or schedule:SPEC,SPEC/every:K (manual: docs/playing.md)."
)
SEAT_SPEC_DETAILS = (
    "SPEC is 'model' (the configured base model with the seat's active adapter, "
    "if its role has one; served in-process or by vLLM, per SPARRING_BACKEND), 'model:base' (no adapter), "
    "'model:ROLE@vN' (a registered adapter version), 'model:PATH_OR_ID' (another base model, a local folder or "
    "a Hugging Face id, served in-process without adapter), 'openai:MODEL' (a model of the OpenAI-compatible API at "
    "SPARRING_OPENAI_BASE_URL, e.g. openai:gpt-4o-mini), 'scripted:BOT' (a rule-based bot: echo, calculator, "
    "always-correct, always-incorrect, stubborn, agreeable, contrarian), 'rules' (judge seats: check the "
    "ground truth, no model call; 'verifier', the old name of rules, is still accepted) or 'verifier:ROLE@vN' "
    "(the judge seat of debate or ensemble: a reward model "
    "trained by `sparring train reward` scores each answer and picks the best; 'verifier:ROLE': the role's "
    "active version). A seat can also change policy from episode to episode: 'pool:ROLE[/MODE]' "
    "(the base model and every promoted version of ROLE), 'pool:SPEC,SPEC,...[/MODE]' (the listed policies), "
    "MODE being uniform (the default), latest, lagged:K (K versions behind) or rated (opponents of the "
    "learners' rating most often); 'schedule:SPEC,SPEC,.../every:K' (in turn, K episodes each) or '.../round' "
    "(one per retrain round). SPARRING_SEATS='{\"critic\": \"openai:gpt-4o-mini\"}' sets defaults that --seat "
    "overrides."
)


class SeatSpecError(ValueError):
    pass


def seat_args(seats: Mapping[str, str] | Sequence[str] | None) -> list[str]:
    """Seats given as a mapping (seat -> spec) or as ``SEAT=SPEC`` strings, as ``--seat`` gives them."""
    return [f"{seat}={spec}" for seat, spec in seats.items()] if isinstance(seats, Mapping) else list(seats or [])


def parse_seat_specs(game: GameSpec, specs: list[str], defaults: Mapping[str, str] | None = None,
                     options: GameOptions | None = None) -> dict[str, str]:
    """Each seat's spec: the user's ``--seat`` choice, else ``defaults`` (the SPARRING_SEATS
    setting unless given; seats the game lacks or that take no policy are ignored there, as the
    setting serves every game), else the seat's default. With the game's ``options``, only the
    seats that play under them (``GameSpec.playing_seats``), and a ``--seat`` for another is refused."""
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
    if options is None:
        return chosen
    playing = [s.name for s in game.playing_seats(options)]
    idle = [item for item in specs if item.partition("=")[0] not in playing]
    if idle:
        raise SeatSpecError(
            f"--seat {idle[0]!r}: that seat does not play in {game.name} with {', '.join(describe(options))}; "
            f"the seats that play: {', '.join(playing)}. Change the options (`sparring games` lists them) or leave "
            "the --seat out"
        )
    return {seat: spec for seat, spec in chosen.items() if seat in playing}


def _checked(game: GameSpec, seat: str, spec: str, where: str) -> str:
    try:
        draw = parse_draw(spec)  # pool: and schedule: name several policies, one per episode
    except DrawSpecError as exc:
        raise SeatSpecError(f"{where}: {exc}") from exc
    if draw is not None:
        for member in draw.members:
            _checked(game, seat, member, f"{where} (member {member!r})")
        return spec
    if verifier_name(spec) is not None:
        return _checked_verifier(game, seat, spec, where)
    if is_rules(spec):
        if game.seat(seat).kind != "judge":
            raise SeatSpecError(f"{where}: only judge seats can be '{RULES}'")
        return RULES
    if not game.seat(seat).takes_policy:
        raise SeatSpecError(
            f"{where}: the {seat} seat of {game.name} is a rules judge (it checks the ground truth and makes "
            f"no model call), so it cannot take a policy; leave --seat {seat}=... out"
        )
    if spec != "model" and not spec.startswith(("scripted:", "model:", "openai:")):
        raise SeatSpecError(f"{where}: unknown policy {spec!r}. {SEAT_SPEC_DETAILS}")
    if spec.startswith("scripted:") and spec.removeprefix("scripted:") not in (bots := known_bots()):
        raise SeatSpecError(f"{where}: unknown scripted bot; built-in bots: {', '.join(bots)}")
    if spec == "openai:":
        raise SeatSpecError(f"{where}: name the model, e.g. openai:gpt-4o-mini")
    if (base := other_base_model(spec)) is not None:
        _check_base_model(base, where)
    return spec


def _checked_verifier(game: GameSpec, seat: str, spec: str, where: str) -> str:
    """A trained verifier fills a judge seat that picks one of several answers (the registry
    is asked for the version itself when the seat's policy is built)."""
    if game.seat(seat).kind != "judge":
        raise SeatSpecError(
            f"{where}: {spec} is a trained verifier, which fills judge seats only; {seat} is a "
            f"{game.seat(seat).kind} seat of {game.name}. Give it a policy (model, model:ROLE@vN, scripted:BOT...)"
        )
    if game.judge_prompt is None or not game.seat(seat).takes_policy:
        raise SeatSpecError(
            f"{where}: the {seat} seat of {game.name} picks no answer among several, so a trained verifier cannot "
            f"fill it; it fills the judge seat of {' and '.join(judge_prompt_readers())}"
        )
    if not verifier_name(spec):
        raise SeatSpecError(f"{where}: name the verifier, e.g. verifier:verifier@v1 (`sparring adapters list`)")
    return spec


def other_base_model(spec: str) -> str | None:
    """The base model a ``model:PATH_OR_ID`` spec names; None for model, model:base and
    model:ROLE@vN (an adapter version: an '@' and no path separator) and other specs."""
    choice = spec.removeprefix("model:") if spec.startswith("model:") else ""
    if not choice or choice == "base" or ("@" in choice and not any(sep in choice for sep in "/\\")):
        return None
    return choice


def check_versions(engine: Engine, specs: Mapping[str, str]) -> None:
    """SeatSpecError, before a run is opened, for a seat that names an adapter version
    (``model:ROLE@vN`` or ``verifier:ROLE@vN``) the registry does not have."""
    from training.registry import UnknownVersionError, get_version

    for seat, spec in specs.items():
        if parse_draw(spec) is not None:
            continue  # pools and schedules: app.seat_pools.resolve.check_draws
        name = verifier_name(spec) or (spec.removeprefix("model:") if spec.startswith("model:") else None)
        if not name or "@" not in name or other_base_model(f"model:{name}") is not None:
            continue  # no version named: the base model, a role's active version, a path or another kind
        try:
            get_version(engine, name)
        except UnknownVersionError as exc:
            raise SeatSpecError(f"--seat {seat}={spec}: {exc}") from exc


def _check_base_model(model: str, where: str) -> None:
    """A base model given as a local path must be a folder written by save_pretrained (a hub
    id or "bundled" can only be checked by loading it, before anything is played)."""
    from graphs.policies.base_models import BUNDLED, ModelLoadError, resolve_model

    if model == BUNDLED:
        return
    try:
        resolve_model(model, cache_dir=load_settings().cache_dir)
    except ModelLoadError as exc:
        raise SeatSpecError(f"{where}: {exc}") from exc


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
    deciding: bool = False
    """Every policy evaluates: in-process models load in ``Settings.deciding_dtype`` (eval, deploy)."""
    backends: list[Backend] = field(default_factory=list)
    _model: Backend | None = None
    _hosted: dict[str, Backend] = field(default_factory=dict)
    _bases: dict[str, Backend] = field(default_factory=dict)
    _verifiers: dict[str, Backend] = field(default_factory=dict)
    _twins: FloatTwins | None = None

    @property
    def _dtype(self) -> str:
        return self.settings.deciding_dtype if self.deciding else self.settings.dtype

    def deciding_policies(self) -> FloatTwins | None:
        """What evaluations that decide play on when the policies also play games: the in-process
        seats on float32 twins of their backends (``graphs.policies.deciding``), unless they
        decide in another precision (``Settings.deciding_dtype``: batch-invariant bfloat16, or the
        playing precision) or this factory's models load in the deciding precision already."""
        from graphs.policies.deciding import DECIDING_PRECISION, FloatTwins

        if self.deciding or self.settings.deciding_dtype != DECIDING_PRECISION:
            return None
        if self._twins is None:
            self._twins = FloatTwins(self._float_twin)
        return self._twins

    def _float_twin(self, backend: InProcessBackend) -> InProcessBackend:
        from graphs.policies.deciding import DECIDING_PRECISION
        from graphs.policies.inprocess import InProcessBackend

        twin = InProcessBackend.from_pretrained(backend.model_name, cache_dir=self.settings.cache_dir,
                                                device=self.settings.device, dtype=DECIDING_PRECISION,
                                                max_batch_size=self.settings.max_batch_size)
        self.backends.append(twin)
        return twin

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
                    dtype=self._dtype,
                    max_batch_size=self.settings.max_batch_size,
                    batch_invariant=self.settings.batch_invariant,
                )
            self.backends.append(self._model)
        return self._model

    def base_backend(self, model: str) -> Backend:
        """Another base model than the settings' one (``model:PATH_OR_ID``), served in-process
        whatever SPARRING_BACKEND says: one backend per model, shared by the seats that name it."""
        if model == self.settings.model:
            return self.model_backend()
        if model not in self._bases:
            from graphs.policies.inprocess import InProcessBackend

            self._bases[model] = InProcessBackend.from_pretrained(
                model, cache_dir=self.settings.cache_dir, device=self.settings.device,
                dtype=self._dtype, max_batch_size=self.settings.max_batch_size,
                batch_invariant=self.settings.batch_invariant,
            )
            self.backends.append(self._bases[model])
        return self._bases[model]

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
        if parse_draw(spec) is not None:  # app.seat_pools.resolve resolves these for play and retrain
            raise SeatSpecError(f"seat {seat} ({spec}): a pool or schedule changes policy from episode to episode, "
                                "and this command plays fixed policies; name one of its members instead")
        if spec.startswith("scripted:"):
            from graphs.registry import scripted_bot

            backend = scripted_bot(spec.removeprefix("scripted:"))
            self.backends.append(backend)
            return Policy(backend, self.sampling)
        if spec.startswith("openai:"):
            return Policy(self.hosted_backend(spec.removeprefix("openai:")), self.sampling)
        if (name := verifier_name(spec)) is not None:
            return self._verifier(f"seat {seat} ({spec})", name)
        base = other_base_model(spec)
        if base is not None:
            from graphs.policies.base_models import ModelLoadError

            try:
                return Policy(self.base_backend(base), self.sampling)
            except ModelLoadError as exc:  # before anything is played: name the seat
                raise ModelLoadError(f"seat {seat} ({spec}): cannot load its base model: {exc}") from exc
        adapter = await self._adapter(seat, spec.removeprefix("model").removeprefix(":") or None)
        return Policy(self.model_backend(), self.sampling, adapter=adapter)

    async def _adapter(self, seat: str, choice: str | None) -> str | None:
        """Load the adapter a seat plays with (its role's active one for a plain 'model')."""
        if choice == "base" or self.engine is None:
            return None
        from training.adapter_folders import verify_folder
        from training.registry import active_version, get_version

        record = get_version(self.engine, choice) if choice else active_version(self.engine, seat)
        if record is None:
            return None
        if record.is_verifier:
            raise SeatSpecError(f"seat {seat}: {record.name} is a verifier (a reward model), not a policy; it fills a "
                                f"judge seat of debate or ensemble as verifier:{record.name}")
        verify_folder(record.path, base_model=self.settings.model, status=record.status)
        backend = self.model_backend()
        if record.name not in backend.adapters():
            await backend.load_adapter(record.name, str(record.path))
        return record.name

    def _verifier(self, where: str, name: str) -> Policy:
        """A judge seat's trained verifier (``verifier:ROLE@vN``, or ROLE's active version),
        its reward model loaded once on the settings' base model, with the threshold it was trained with."""
        from graphs.policies.reward_model import RewardModel
        from graphs.policies.verifier import VerifierBackend
        from training.adapter_folders import verify_folder
        from training.registry import TRAINING_EVAL, RegistryError, active_version, get_version

        if self.engine is None:
            raise SeatSpecError(f"{where}: verifiers are found in the adapter registry, and this command reads none")
        try:
            record = get_version(self.engine, name) if "@" in name else active_version(self.engine, name)
        except RegistryError as exc:
            raise SeatSpecError(f"{where}: {exc}; `sparring adapters list` lists the versions") from exc
        if record is None:
            raise SeatSpecError(f"{where}: role {name!r} has no active version: name one (verifier:{name}@vN), or "
                                f"promote one with `sparring adapters promote {name}@vN`")
        if not record.is_verifier:
            raise SeatSpecError(f"{where}: {record.name} is a policy (trained by {record.trainer}), not a verifier: "
                                f"give the seat model:{record.name}, or a verifier trained by `sparring train reward`")
        if record.name not in self._verifiers:
            verify_folder(record.path, base_model=self.settings.model, status=record.status)
            threshold = record.eval.get(TRAINING_EVAL, {}).get("threshold")
            if threshold is None:
                raise SeatSpecError(f"{where}: {record.name} has no threshold in its training metrics: it was not "
                                    "published by `sparring train reward`; train the verifier again")
            model = RewardModel.load(record.name, record.path, base_model=self.settings.model, threshold=threshold,
                                     cache_dir=self.settings.cache_dir, device=self.settings.device,
                                     dtype=self.settings.dtype)
            self._verifiers[record.name] = VerifierBackend(model, model_name=self.settings.model,
                                                            readers=judge_prompt_readers())
            self.backends.append(self._verifiers[record.name])
        return Policy(self._verifiers[record.name], self.sampling, adapter=record.name)

    async def policies(self, specs: dict[str, str]) -> dict[str, Policy]:
        return {seat: await self.policy(seat, spec) for seat, spec in specs.items() if not is_rules(spec)}

    async def aclose(self) -> None:
        for backend in self.backends:
            await backend.aclose()
