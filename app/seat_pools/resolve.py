"""Pool and schedule seats (``app.seat_pools.spec``) resolved against the store: a role's
adapter history from the registry, a rated pool's weights from the ratings, and each member's
policy from the factory. `sparring play` resolves them once; `sparring retrain` every round,
so that versions promoted in a round join the pool of the next.

Evaluations and gates play fixed policies: there a drawn seat plays its default policy
(``evaluation_specs``), the same opponent every round, so their figures stay comparable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlalchemy import Engine

from app.seat_pools.spec import DrawnSeat, DrawSpec, EpisodePolicies, parse_draw
from app.wiring import PolicyFactory, SeatSpecError
from graphs.policies.policy import Policy
from graphs.registry import GameSpec

BASE_MEMBER = "model:base"
"""the first member of a role's history: the base model, before any version"""


def drawn_specs(specs: Mapping[str, str]) -> dict[str, DrawSpec]:
    """The seats whose spec is a pool or a schedule (specs already checked by parse_seat_specs)."""
    return {seat: draw for seat, spec in specs.items() if (draw := parse_draw(spec)) is not None}


def evaluation_specs(game: GameSpec, specs: Mapping[str, str]) -> dict[str, str]:
    """``specs`` with each drawn seat back on its default policy."""
    drawn = drawn_specs(specs)
    return {seat: game.seat(seat).default_policy if seat in drawn else spec for seat, spec in specs.items()}


def check_draws(engine: Engine, game: GameSpec, specs: Mapping[str, str]) -> None:
    """SeatSpecError, before anything is played, for a pool or schedule that names an adapter
    version the registry does not have, or the history of a role that has none and is no
    learner seat of the game."""
    for seat, draw in drawn_specs(specs).items():
        members(engine, game, seat, draw, specs[seat])


def members(engine: Engine, game: GameSpec, seat: str, draw: DrawSpec, spec: str) -> list[str]:
    """The member specs of a drawn seat, now: a role's history oldest first, or the listed ones."""
    from training.registry import UnknownVersionError, get_version, list_versions

    if draw.role is None:
        for member in draw.members:
            name = member.removeprefix("model:")
            if member.startswith("model:") and "@" in name and not any(sep in name for sep in "/\\"):
                try:
                    get_version(engine, name)
                except UnknownVersionError as exc:
                    raise SeatSpecError(f"--seat {seat}={spec}: {exc}") from exc
        return list(draw.members)
    versions = list_versions(engine, draw.role)
    learners = [s.name for s in game.seats if s.kind == "learner"]
    if not versions and draw.role not in learners:
        roles = sorted({v.role for v in list_versions(engine)})
        raise SeatSpecError(
            f"--seat {seat}={spec}: no adapter version of role {draw.role!r} is registered and {game.name} has no "
            f"learner seat {draw.role!r}, so its history is empty. Roles with versions: {', '.join(roles) or 'none'}; "
            f"learner seats of {game.name}: {', '.join(learners) or 'none'}. Or list the members, e.g. "
            "pool:scripted:stubborn,model:base"
        )
    promoted = sorted((v for v in versions if v.promoted_at is not None), key=lambda v: v.version)
    return [BASE_MEMBER, *(f"model:{v.name}" for v in promoted)]


async def resolve(factory: PolicyFactory, engine: Engine, game: GameSpec, seat: str, spec: str,
                  learners: Mapping[str, Policy], round_index: int = 1) -> DrawnSeat:
    """The drawn seat ``spec`` names, with its members' policies loaded; ``learners``: the
    policies of the game's learner seats, whom a rated pool matches."""
    draw = parse_draw(spec)
    found = members(engine, game, seat, draw, spec)
    if draw.mode == "latest":
        found = found[-1:]
    elif draw.mode == "lagged":
        found = [found[max(0, len(found) - 1 - draw.k)]]
    policies = tuple([await factory.policy(seat, member) for member in found])
    weights = _matched(engine, game, policies, learners) if draw.mode == "rated" else None
    return DrawnSeat(draw, policies, weights, round_index)


def _matched(engine: Engine, game: GameSpec, members: tuple[Policy, ...],
             learners: Mapping[str, Policy]) -> tuple[float, ...] | None:
    """Weights p(1-p), p the chance that the learners (their mean rating) beat each member;
    None (uniform) while the learners have no rating; an unrated member counts as even."""
    from evaluation.ratings import ladders, player_name

    found = ladders(engine, game.name)
    ratings = {r.player: r.rating for r in found[0].ratings} if found else {}
    rated = [ratings[player_name(p.label)] for p in learners.values() if player_name(p.label) in ratings]
    if not rated:
        return None
    target = sum(rated) / len(rated)
    weights = []
    for member in members:
        p = 1.0 / (1.0 + 10 ** ((ratings.get(player_name(member.label), target) - target) / 400.0))
        weights.append(p * (1.0 - p))
    return tuple(weights)


async def episode_policies(factory: PolicyFactory, engine: Engine, game: GameSpec, specs: Mapping[str, str], *,
                           first_seed: int) -> Mapping[str, Policy] | EpisodePolicies:
    """The seats' policies for `sparring play`: a plain mapping when no seat is drawn."""
    drawn = drawn_specs(specs)
    fixed = await factory.policies({seat: spec for seat, spec in specs.items() if seat not in drawn})
    if not drawn:
        return fixed
    learners = _learners(game, fixed)
    seats = {seat: await resolve(factory, engine, game, seat, specs[seat], learners) for seat in drawn}
    return EpisodePolicies(fixed, seats, first_seed)


def _learners(game: GameSpec, policies: Mapping[str, Policy]) -> dict[str, Policy]:
    return {s.name: policies[s.name] for s in game.seats if s.kind == "learner" and s.name in policies}


@dataclass
class RoundDraws:
    """What `sparring retrain` plays each round: the live policies (promotions switch them),
    with its drawn seats resolved again for the round."""

    factory: PolicyFactory
    engine: Engine
    game: GameSpec
    specs: dict[str, str]
    """the drawn seats' specs"""

    async def __call__(self, live: Callable[[], Mapping[str, Policy]], round_index: int,
                       first_seed: int) -> EpisodePolicies:
        learners = _learners(self.game, live())
        seats = {seat: await resolve(self.factory, self.engine, self.game, seat, spec, learners, round_index)
                 for seat, spec in self.specs.items()}
        return EpisodePolicies(live, seats, first_seed)
