"""Credit assignment: the scalar reward of each turn of a role, per role and per turn.

Reward events are read as logged (of several events with one name on a turn, the latest
wins). The credit of a turn is:

- math-reflection ``critic``: ``verdict_correct + improvement``, where improvement looks at
  the actor's answers around the critique: +1 if the actor's next answer is correct and the
  answer the critic reviewed was not, -1 if the reviewed answer was correct and the next one
  is not, 0 otherwise, and 0 when the actor gave no next answer. A critique without a
  ``verdict_correct`` event (a task without ground truth) has no credit.
- every other role (math-reflection ``actor``, debate ``debater_a`` / ``debater_b``...): the
  sum of the reward events on the turn. For the actor that is its ``correct`` reward (1/0,
  0 for an unparsed answer); for a debater, ``correct`` on each turn plus ``win`` (1, 0, or
  0.5 for a tie) on its last one. A turn with no reward event has no credit.

Turns without credit make no row in builders that need a reward; they are counted.
"""

from __future__ import annotations

from training.datasets.reading import EpisodeLog, LoggedTurn

CORRECT = "correct"
"""The ground-truth reward event (1.0 correct, 0.0 incorrect or unparsed)."""
VERDICT_CORRECT = "verdict_correct"

_CONTEXT_SEATS = {("math-reflection", "critic"): ("actor",)}


def context_seats(game: str, role: str) -> tuple[str, ...]:
    """The other seats whose turns (rewards only) the role's credit rule reads."""
    return _CONTEXT_SEATS.get((game, role), ())


def turn_credits(episode: EpisodeLog, role: str) -> dict[str, float]:
    """turn id -> credit, for the selected turns of ``role`` in ``episode`` that have one."""
    if (episode.game, role) == ("math-reflection", "critic"):
        return _critic_credits(episode, role)
    return {t.turn_id: sum(t.rewards.values()) for t in episode.turns if t.selected and t.seat == role and t.rewards}


def _critic_credits(episode: EpisodeLog, role: str) -> dict[str, float]:
    credits: dict[str, float] = {}
    answers = [t for t in episode.turns if t.seat == "actor"]
    for turn in episode.turns:
        if not (turn.selected and turn.seat == role and VERDICT_CORRECT in turn.rewards):
            continue
        earlier = [a for a in answers if a.idx < turn.idx]
        reviewed = earlier[-1] if earlier else None
        following = next((a for a in answers if a.idx > turn.idx), None)
        credits[turn.turn_id] = turn.rewards[VERDICT_CORRECT] + improvement(reviewed, following)
    return credits


def improvement(reviewed: LoggedTurn | None, following: LoggedTurn | None) -> float:
    """+1 incorrect -> correct, -1 correct -> incorrect, 0 otherwise (or without both answers
    checked against ground truth)."""
    if reviewed is None or following is None or CORRECT not in reviewed.rewards or CORRECT not in following.rewards:
        return 0.0
    before, after = reviewed.rewards[CORRECT] >= 0.5, following.rewards[CORRECT] >= 0.5
    return float(after) - float(before)
