"""Reading each succeeded episode's rewards of a run (``graphs.metrics.episode_rewards``), on real
stores: which episodes and rewards count, their order, and the invalid-move share."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from graphs.metrics.episode_rewards import Reward, episode_rewards, invalid_move_rate
from graphs.metrics.stats import wilson
from storage.engine import session_scope
from storage.models import Episode, Run
from storage.models import Reward as RewardRow

REWARDS = {
    # episode id: (run, task, status, [(seat, name, value, info)] in recording order)
    "e1": ("run", "t1", "succeeded", [("a", "valid", 1.0, None), ("a", "valid", 0.0, {"problem": "x"}),
                                      ("b", "valid", 0.0, None), ("a", "win", 0.0, None), ("a", "win", 1.0, None)]),
    "e2": ("worker", "t2", "succeeded", [("a", "win", 0.0, None)]),
    "e3": ("run", "t1", "failed", [("a", "valid", 0.0, None), ("a", "win", 1.0, None)]),
    "e4": ("run", "t1", "succeeded", []),
    "e5": ("other", "t1", "succeeded", [("a", "win", 1.0, None)]),
}


@pytest.fixture
def store_with_rewards(store: Engine) -> Engine:
    with session_scope(store) as session:
        for run, parent in (("run", None), ("worker", "run"), ("other", None)):
            session.add(Run(id=run, game="g", config={}, seed=0, host="h", pid=1, parent_id=parent))
        session.flush()
        for episode_id, (run, task, status, rewards) in REWARDS.items():
            session.add(Episode(id=episode_id, run_id=run, game="g", task_id=task, task_source="test", seed=0,
                                status=status))
            session.flush()
            for seat, name, value, info in rewards:
                session.add(RewardRow(episode_id=episode_id, seat=seat, name=name, value=value, info=info))
                session.flush()
    return store


def test_succeeded_episodes_of_the_run_and_its_workers_with_their_rewards_in_order(store_with_rewards: Engine) -> None:
    e1, e2 = episode_rewards(store_with_rewards, "run")
    assert (e1.task_id, e2.task_id) == ("t1", "t2")
    assert e1.rewards[("a", "valid")] == [Reward(1.0, {}), Reward(0.0, {"problem": "x"})]
    assert e1.value("a", "win") == 1.0 and e2.value("a", "win") == 0.0  # the latest event
    with pytest.raises(KeyError):
        e2.value("b", "win")


def test_seat_and_names_narrow_the_rewards_and_the_episodes(store_with_rewards: Engine) -> None:
    [e1] = episode_rewards(store_with_rewards, "run", seat="a", names=("valid",))
    assert list(e1.rewards) == [("a", "valid")]
    assert episode_rewards(store_with_rewards, "run", seat="c") == []


def test_invalid_move_rate_counts_the_seats_moves_below_one_half(store_with_rewards: Engine) -> None:
    estimate, per_task = invalid_move_rate(episode_rewards(store_with_rewards, "run"), "a", "valid")
    assert estimate == wilson(1, 2)
    assert per_task == {"t1": pytest.approx(0.5 + (1 - 0.5 * 2) / 1.0), "t2": pytest.approx(0.5 + (0 - 0) / 1.0)}
    assert invalid_move_rate([], "a", "valid") == (wilson(0, 0), {})
