"""Seats filled per episode from a pool or a schedule of policies: non-stationary context agents.

A seat spec ``pool:...`` or ``schedule:...`` names several policies for one seat, and each
episode plays one of them, chosen from the episode's seed: the same command plays the same
draws again, whichever worker plays which episode, and each episode's seats column and turns
record the policy it drew (``sparring episodes list --policy``).

``pool:ROLE[/MODE]``
    the role's adapter history: the base model (its v0), then every version that was ever
    promoted, oldest first (re-read every retrain round, so self-play meets its own history)
``pool:SPEC,SPEC,...[/MODE]``
    the listed policies (model, model:base, model:ROLE@vN, openai:MODEL, scripted:BOT)
``MODE``
    ``uniform`` (default): each episode draws a member at random; ``latest``: the newest
    member; ``lagged:K``: the member K places before the newest (the oldest when the pool is
    shorter); ``rated``: each episode draws a member with weight p(1-p), p being the chance
    that the learner seats' policy beats it by the store's ratings (``evaluation.ratings``),
    so opponents of its own strength come most often (an unrated member counts as even)
``schedule:SPEC,SPEC,.../every:K``
    the members in turn, switching every K episodes (counted from each command's, or each
    retrain round's, first episode)
``schedule:SPEC,SPEC,.../round``
    the members in turn, one per retrain round (`sparring play` plays the first)

Which policies a pool holds is the store's business (the registry, the ratings), read by
``app.seat_pools.resolve``: this module parses the specs and draws among resolved policies.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from graphs.policies.policy import Policy
from graphs.seats import RULES, is_rules
from graphs.seeds import derive_seed

POOL_MODES = ("uniform", "latest", "lagged:K", "rated")
SCHEDULE_MODES = ("every:K", "round")
_MODE = re.compile(r"(?P<name>uniform|latest|rated|round|lagged|every)(?::(?P<k>[0-9]+))?")
_ROLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_POLICY_WORDS = ("model", "scripted", "openai", RULES, "verifier", "pool", "schedule")
"""what a seat spec starts with (``verifier``: a trained verifier, ``verifier:NAME``, or the old name
of RULES): a pool's single member with none of these names a role"""


class DrawSpecError(ValueError):
    """A pool or schedule spec that cannot be read; the message says what is wrong and shows the syntax."""


@dataclass(frozen=True)
class DrawSpec:
    """A parsed ``pool:`` or ``schedule:`` seat spec."""

    kind: str
    """pool or schedule"""
    members: tuple[str, ...]
    """the listed member specs (empty for a role's history)"""
    role: str | None
    """``pool:ROLE``: the role whose adapter history is the pool"""
    mode: str
    """uniform, latest, lagged or rated (pool); every or round (schedule)"""
    k: int = 0
    """lagged's K, or every's K"""


def parse_draw(spec: str) -> DrawSpec | None:
    """The pool or schedule ``spec`` names; None for any other seat spec."""
    kind, sep, rest = spec.partition(":")
    if kind not in ("pool", "schedule") or not sep:
        return None
    body, mode, k = _split_mode(rest)
    members = tuple(m.strip() for m in body.split(",") if m.strip())
    nested = [m for m in members if m.startswith(("pool:", "schedule:")) or is_rules(m)]
    if nested:
        raise DrawSpecError(f"{spec!r}: {nested[0]!r} cannot be a member; members are single policies "
                            "(model, model:base, model:ROLE@vN, openai:MODEL, scripted:BOT)")
    if kind == "pool":
        if not members:
            raise DrawSpecError(f"{spec!r}: name a role or the members, e.g. pool:debater_a/uniform or "
                                "pool:scripted:stubborn,scripted:contrarian")
        mode = mode or "uniform"
        if mode not in ("uniform", "latest", "lagged", "rated"):
            raise DrawSpecError(f"{spec!r}: a pool draws by {', '.join(POOL_MODES)}, not {mode!r}")
        role = members[0] if len(members) == 1 and _names_role(members[0]) else None
        return DrawSpec("pool", () if role else members, role, mode, k)
    if mode not in ("every", "round"):
        raise DrawSpecError(f"{spec!r}: say when the schedule switches: /every:K (episodes) or /round (retrain "
                            "rounds), e.g. schedule:scripted:stubborn,scripted:contrarian/every:20")
    if len(members) < 2 or any(_names_role(m) for m in members):
        raise DrawSpecError(f"{spec!r}: a schedule switches between at least two policies (model, model:base, "
                            "model:ROLE@vN, openai:MODEL, scripted:BOT), e.g. schedule:scripted:agreeable,"
                            "scripted:contrarian/every:20")
    if mode == "every" and k < 1:
        raise DrawSpecError(f"{spec!r}: every:K switches every K >= 1 episodes, e.g. /every:20")
    return DrawSpec("schedule", members, None, mode, k)


def _split_mode(rest: str) -> tuple[str, str | None, int]:
    """The members, and the mode after the last '/' when that is one (a member may hold a '/':
    openai:org/model, model:/path/to/model)."""
    body, sep, tail = rest.rpartition("/")
    match = _MODE.fullmatch(tail) if sep else None
    if match is None:
        return rest, None, 0
    name, k = match["name"], match["k"]
    if (k is None) != (name not in ("lagged", "every")):
        raise DrawSpecError(f"/{tail}: the modes are {', '.join(POOL_MODES)} (pools) and "
                            f"{', '.join(SCHEDULE_MODES)} (schedules), K a whole number")
    return body, name, int(k or 0)


def _names_role(member: str) -> bool:
    return member.split(":")[0] not in _POLICY_WORDS and _ROLE.fullmatch(member) is not None


@dataclass(frozen=True)
class DrawnSeat:
    """A seat's resolved members and how each episode picks one."""

    spec: DrawSpec
    members: tuple[Policy, ...]
    """a pool's members (latest and lagged: the one chosen), or a schedule's in order"""
    weights: tuple[float, ...] | None = None
    """a pool's draw weights (None: uniform)"""
    round_index: int = 1
    """the retrain round being played (a schedule by round picks its member by it)"""

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("a drawn seat needs at least one member")

    def pick(self, seat: str, seed: int, number: int) -> Policy:
        """The member the episode of ``seed``, the ``number``-th of its command or round, plays."""
        if self.spec.kind == "schedule":
            turn = self.round_index - 1 if self.spec.mode == "round" else number // self.spec.k
            return self.members[turn % len(self.members)]
        if len(self.members) == 1:
            return self.members[0]
        return random.Random(derive_seed(seed, "pool", seat)).choices(self.members, weights=self.weights)[0]


class EpisodePolicies:
    """The policies of each episode: ``fixed`` seats as given (a mapping, or a function asked
    as each episode starts, such as retrain's live policies), drawn seats picked by the
    episode's seed. ``first_seed``: the seed of the command's (or round's) first episode."""

    def __init__(self, fixed: Mapping[str, Policy] | Callable[[], Mapping[str, Policy]],
                 drawn: Mapping[str, DrawnSeat], first_seed: int) -> None:
        self._fixed = fixed
        self.drawn = dict(drawn)
        self.first_seed = first_seed

    def for_episode(self, seed: int) -> dict[str, Policy]:
        policies = dict(self._fixed() if callable(self._fixed) else self._fixed)
        number = seed - self.first_seed
        policies.update({seat: drawn.pick(seat, seed, number) for seat, drawn in self.drawn.items()})
        return policies

    def __call__(self) -> dict[str, Policy]:
        """The first episode's policies (what a runner checks before it plays)."""
        return self.for_episode(self.first_seed)
