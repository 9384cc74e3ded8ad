"""Scripted negotiators for the counterpart seat (or any negotiator seat), one per strategy.

A bot reads only what a model in its seat reads: the pool and its own values (the first
prompt), the offer standing to it (the last one), and how many moves it has made (its own
assistant messages). Its strategy is a target, a share of what the whole pool is worth to it,
that depends on how many moves it has made: it accepts a standing offer worth at least the
target, else proposes the split that reaches the target with the least value for itself (of
those, the one taking the fewest items). Targets never rise, so a bot never takes a concession
back, and it never turns down an offer worth more than what it proposes: its moves are
coherent by the judge's rules.

- tough: demands the whole pool's worth, concedes a tenth a move, never below 80%;
- fair: aims at half of what the pool is worth to it, from the first move;
- conceding: starts at the whole pool's worth and concedes a fifth a move, down to 20%.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from graphs.policies.base import BackendError, GenerationRequest, Message
from graphs.policies.scripted import Bot

Target = Callable[[int], float]
"""moves the bot has made -> the share of the pool's worth (to it) it holds out for"""

_POOL = re.compile(r"^Pool: (.+)$", re.MULTILINE)
_VALUES = re.compile(r"^Your values: (.+)$", re.MULTILINE)
_OFFER = re.compile(r"^Standing offer to you: (.+)$", re.MULTILINE)
_PAIR = re.compile(r"([a-z]+)=(\d+)")


@dataclass(frozen=True)
class View:
    items: tuple[str, ...]
    counts: tuple[int, ...]
    values: tuple[int, ...]
    offer: tuple[int, ...] | None
    """what the standing offer gives the bot"""
    moves_made: int

    def worth(self, bundle: tuple[int, ...]) -> int:
        return sum(n * v for n, v in zip(bundle, self.values, strict=True))


def _pairs(line: str) -> dict[str, int]:
    return {name: int(count) for name, count in _PAIR.findall(line)}


def read_view(messages: list[Message], bot: str) -> View:
    """What the bot knows, from its prompt (``prompts.py`` writes these lines)."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    first, last = (users[0], users[-1]) if users else ("", "")
    pool, values = _POOL.search(first), _VALUES.search(first)
    if pool is None or values is None:
        raise BackendError(f"the negotiation bot {bot!r} found no 'Pool:' and 'Your values:' lines in its prompt: "
                           "it plays a seat of the negotiation game only")
    counts, own = _pairs(pool.group(1)), _pairs(values.group(1))
    items = tuple(counts)
    offer = _OFFER.search(last)
    offered = _pairs(offer.group(1)) if offer else None
    return View(items, tuple(counts.values()), tuple(own.get(i, 0) for i in items),
                None if offered is None else tuple(offered.get(i, 0) for i in items),
                sum(m["role"] == "assistant" for m in messages))


def choose(view: View, target: float) -> tuple[int, ...] | None:
    """None to accept the standing offer, else the take to propose (see the module docstring)."""
    least = math.ceil(target * view.worth(view.counts) - 1e-9)  # 0.7 * 10 is 7.000000000000001 in floats
    if view.offer is not None and view.worth(view.offer) >= least:
        return None
    enough = [t for t in itertools.product(*(range(c + 1) for c in view.counts)) if view.worth(t) >= least]
    return min(enough, key=lambda t: (view.worth(t), sum(t)), default=view.counts)


def strategy_bot(name: str, target: Target, pitch: str) -> Bot:
    def bot(messages: list[Message], request: GenerationRequest) -> str:
        view = read_view(messages, name)
        take = choose(view, target(view.moves_made))
        if take is None:
            return "That works for me.\nMove: Accept"
        return f"{pitch}\nMove: Propose " + " ".join(f"{i}={n}" for i, n in zip(view.items, take, strict=True))

    bot.__name__ = name
    return bot


BOTS: dict[str, Bot] = {
    "tough": strategy_bot("tough", lambda made: max(1.0 - 0.1 * made, 0.8), "I need most of this pool."),
    "fair": strategy_bot("fair", lambda made: 0.5, "Let us split this fairly."),
    "conceding": strategy_bot("conceding", lambda made: max(1.0 - 0.2 * made, 0.2), "I can give a little."),
}
