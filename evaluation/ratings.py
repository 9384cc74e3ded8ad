"""Ratings of every policy that played rated games, computed from the logged judgments.

A *rated game* is a judgment that names a winner seat and a loser seat (debate's rules or
model judge, a rubric judge's preference), or a tie (a judgment with neither, and no score) in
an episode with exactly two seats that are not judges. Each side is the policy that played the
seat in that episode (the episode's seats column): an adapter version by its name
(``debater_a@v2``), anything else by its policy label (``scripted:stubborn``, a base model's
name). A game of a policy against itself says nothing about it and is left out.

Ratings are one Bradley-Terry fit of all the games of a game at once, on the Elo scale (400
points = 10:1 odds), so the order games were played in does not matter as it does for
sequential Elo updates. Every policy is given one virtual win and one virtual loss against a
virtual player, which keeps unbeaten and winless policies finite and pulls the ratings of
policies with few games towards the others'. Only differences are measured, so a ladder's
ratings average 1500. The 95% interval comes from the fit's curvature (the inverse Hessian of
the log-likelihood, for a rating relative to the ladder's average): a bootstrap over games
would give a policy that won each of its few games an interval of zero width.

Ratings fitted from gate matches alone (each version against its predecessor) chain their
errors along the lineage and reward beating the one opponent a version was selected against;
each policy's score against one fixed reference opponent (wins plus half the ties, Wilson 95%
interval) does not, and is reported beside the rating.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Engine

from graphs.metrics.stats import Z95, Estimate, wilson
from graphs.seats import is_rules
from storage.rating_rows import preferences

START = 1500.0
"""the average rating of a ladder"""
ELO = 400.0 / math.log(10.0)
"""rating points per unit of log-odds"""
MAX_ITERATIONS = 100
TOLERANCE = 1e-9
_ADAPTER = re.compile(r"\+(?P<name>[A-Za-z0-9][A-Za-z0-9_-]*@v[0-9]+)$")


class RatingsError(ValueError):
    """A ratings question that the store cannot answer; the message says what to ask instead."""


@dataclass(frozen=True)
class RatedGame:
    episode_id: str
    game: str
    first: str
    """the winner's policy (one side of a tie)"""
    second: str
    """the loser's policy (the other side of a tie)"""
    tie: bool = False

    @property
    def score(self) -> float:
        """``first``'s score: 1 for a win, 1/2 for a tie."""
        return 0.5 if self.tie else 1.0


@dataclass(frozen=True)
class Rating:
    player: str
    rating: float
    low: float
    high: float
    """the rating's 95% interval"""
    games: int
    wins: int
    ties: int
    losses: int
    versus: Estimate | None = None
    """score against the ladder's reference (wins plus half the ties over games); None for the
    reference itself and for a policy that never played it"""

    def to_dict(self) -> dict[str, Any]:
        return {"player": self.player, "rating": round(self.rating, 1), "low": round(self.low, 1),
                "high": round(self.high, 1), "games": self.games, "wins": self.wins, "ties": self.ties,
                "losses": self.losses, "versus": None if self.versus is None else self.versus.to_dict()}


@dataclass(frozen=True)
class Ladder:
    """The ratings of one game's players, best first."""

    game: str
    ratings: tuple[Rating, ...]
    games: int
    """rated games it was fitted on"""
    reference: str | None
    """the fixed opponent of every ``Rating.versus`` (None: it played no game of this game)"""

    def rows(self) -> list[dict[str, Any]]:
        """One row per player, for programs."""
        return [{"game": self.game, **r.to_dict(), "reference": self.reference} for r in self.ratings]

    def table(self) -> list[dict[str, str]]:
        """One row per player, for people: rating, interval, wins-ties-losses, score against the reference."""
        return [{"player": r.player, "rating": f"{r.rating:.0f}", "95% interval": f"[{r.low:.0f}, {r.high:.0f}]",
                 "W-T-L": f"{r.wins}-{r.ties}-{r.losses}", "vs reference": r.versus.format() if r.versus else "-"}
                for r in self.ratings]


def player_name(label: str) -> str:
    """How a seat's policy label names a player: an adapter version by its name
    (``bundled+debater_a@v2`` -> ``debater_a@v2``), anything else as it is."""
    match = _ADAPTER.search(label)
    return match["name"] if match else label


def read_games(engine: Engine, game: str | None = None) -> list[RatedGame]:
    """Every rated game of the store's succeeded episodes (of ``game`` only, if given), in the
    order they were judged."""
    rows = preferences(engine, game)
    judges = _judge_seats({row.game for row in rows})
    found = []
    for row in rows:
        seats = row.seats
        if row.winner_seat is not None:
            sides, tied = [row.winner_seat, row.loser_seat], False
        else:
            sides = [s for s, label in seats.items()
                     if s != row.judge_seat and s not in judges.get(row.game, ()) and not is_rules(label)]
            tied = True
        if len(sides) != 2 or not all(seats.get(s) for s in sides):
            continue
        first, second = (player_name(seats[s]) for s in sides)
        if first != second:
            found.append(RatedGame(row.episode_id, row.game, first, second, tied))
    return found


def _judge_seats(games: set[str]) -> dict[str, set[str]]:
    """The judge seats of each registered game (a game no longer registered: none known)."""
    from graphs.registry import game_registry

    registry = game_registry()
    return {g: {s.name for s in registry[g].seats if s.kind == "judge"} for g in games if g in registry}


def fit_ratings(games: Sequence[RatedGame]) -> dict[str, tuple[float, float, float]]:
    """Each player's rating and 95% interval, ``{player: (rating, low, high)}``."""
    players = sorted({g.first for g in games} | {g.second for g in games})
    if not players:
        return {}
    index = {p: i for i, p in enumerate(players)}
    n = len(players)
    first = np.array([index[g.first] for g in games], dtype=np.int64)
    second = np.array([index[g.second] for g in games], dtype=np.int64)
    score = np.array([g.score for g in games])
    scored = (np.bincount(first * n + second, score, n * n)
              + np.bincount(second * n + first, 1 - score, n * n)).reshape(n, n)
    theta, curvature = _fit(scored)
    centre = np.eye(n) - 1.0 / n  # ratings relative to the players' mean, which the games cannot place
    spread = Z95 * ELO * np.sqrt(np.clip(np.diag(centre @ np.linalg.inv(curvature) @ centre), 0.0, None))
    rating = START + ELO * (theta - theta.mean())
    return {p: (float(rating[i]), float(rating[i] - spread[i]), float(rating[i] + spread[i])) for p, i in index.items()}


def _log_likelihood(theta: np.ndarray, scored: np.ndarray) -> float:
    """Bradley-Terry log-likelihood of ``scored[i, j]`` (what i scored against j) plus each
    player's virtual win and loss against a player of strength 0."""
    diff = theta[:, None] - theta[None, :]
    return float(-(scored * np.logaddexp(0.0, -diff)).sum() - np.logaddexp(0.0, -theta).sum()
                 - np.logaddexp(0.0, theta).sum())


def _fit(scored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The strengths (log-odds) that maximise ``_log_likelihood``, by Newton's method with step
    halving (the function is concave, and strictly so with the virtual games), and its
    curvature there (the negative Hessian, whose inverse is the strengths' covariance)."""
    games = scored + scored.T
    theta = np.zeros(len(scored))
    for _ in range(MAX_ITERATIONS):
        expected = 1.0 / (1.0 + np.exp(-(theta[:, None] - theta[None, :])))
        anchor = 1.0 / (1.0 + np.exp(-theta))
        gradient = (scored - games * expected).sum(axis=1) + 1.0 - 2.0 * anchor
        weight = games * expected * (1.0 - expected)
        curvature = np.diag(weight.sum(axis=1) + 2.0 * anchor * (1.0 - anchor)) - weight
        step = np.linalg.solve(curvature, gradient)
        if np.max(np.abs(step)) < TOLERANCE:
            break
        before = _log_likelihood(theta, scored)
        while _log_likelihood(theta + step, scored) < before and np.max(np.abs(step)) > TOLERANCE:
            step = step / 2
        theta = theta + step
    return theta, curvature


def ladders(engine: Engine, game: str | None = None, reference: str | None = None) -> list[Ladder]:
    """One ladder per game with rated games (of ``game`` only, if given). ``reference``: the
    fixed opponent every policy's score is measured against; by default, in each game, the
    policy that played the most rated games. RatingsError when ``reference`` played none."""
    games = read_games(engine, game)
    by_game: dict[str, list[RatedGame]] = {}
    for g in games:
        by_game.setdefault(g.game, []).append(g)
    if reference is not None and by_game and not any(reference in (g.first, g.second) for g in games):
        players = sorted({p for g in games for p in (g.first, g.second)})
        raise RatingsError(f"--reference {reference!r} played no rated game; players: {', '.join(players)}")
    return [_ladder(name, played, reference) for name, played in sorted(by_game.items())]


def _ladder(game: str, games: list[RatedGame], reference: str | None) -> Ladder:
    fitted = fit_ratings(games)
    played = Counter(p for g in games for p in (g.first, g.second))
    if reference is None:
        reference = min(played, key=lambda p: (-played[p], p))
    elif reference not in played:
        reference = None
    wins = Counter(g.first for g in games if not g.tie)
    ties = Counter(p for g in games if g.tie for p in (g.first, g.second))
    ratings = [Rating(player, rating, low, high, played[player], wins[player], ties[player],
                      played[player] - wins[player] - ties[player], _versus(games, player, reference))
               for player, (rating, low, high) in fitted.items()]
    ratings.sort(key=lambda r: (-r.rating, r.player))
    return Ladder(game, tuple(ratings), len(games), reference)


def _versus(games: Sequence[RatedGame], player: str, reference: str | None) -> Estimate | None:
    """``player``'s score against ``reference``: wins plus half the ties, over their games."""
    if reference is None or player == reference:
        return None
    met = [g for g in games if {g.first, g.second} == {player, reference}]
    if not met:
        return None
    return wilson(sum(g.score if g.first == player else 1 - g.score for g in met), len(met))
