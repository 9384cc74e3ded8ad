"""What the viewer reads beyond storage's rows (``storage.viewer_rows``, ``storage.queries``):
one task played by two policies, compared, and a run with its episodes counted by status.

Plain dicts out, as storage.queries gives.
"""

from __future__ import annotations

import difflib
from typing import Any

from sqlalchemy import Engine

from storage.queries import EpisodeFilter, count_episodes_by_status, get_episode, list_episodes
from storage.viewer_rows import run_row


def get_run(engine: Engine, run_id: str) -> dict[str, Any]:
    row = run_row(engine, run_id)
    if row is None:
        raise KeyError(f"no run {run_id!r}; GET /api/runs lists them")
    return {**row, "episodes_by_status": count_episodes_by_status(engine, run_id)}


def tasks_of(engine: Engine, a: str, b: str, limit: int = 200) -> list[dict[str, Any]]:
    """Tasks both policies played (among each one's latest ``limit`` episodes), with each
    side's latest reward: the places to compare them."""
    sides = [list_episodes(engine, EpisodeFilter(policy=p), limit=limit, count=False).items for p in (a, b)]
    latest = [{} for _ in sides]
    for i, episodes in enumerate(sides):
        for episode in episodes:  # newest first: keep the first seen
            latest[i].setdefault(episode["task_id"], episode)
    shared = [t for t in latest[0] if t in latest[1]]
    return [{"task_id": t, "a": latest[0][t], "b": latest[1][t]} for t in shared]


def compare(engine: Engine, task_id: str, a: str, b: str) -> dict[str, Any]:
    """The latest episode of ``task_id`` played by each policy, in full, and what changed:
    status, reward and final answer side by side, and a line diff of the last responses.
    ``note`` says so when the two episodes are of different games (None when they are not)."""
    episodes = []
    for policy in (a, b):
        page = list_episodes(engine, EpisodeFilter(task_id=task_id, policy=policy), limit=1, count=False)
        if not page.items:
            raise KeyError(f"no episode of task {task_id!r} played by {policy!r}")
        episodes.append(get_episode(engine, page.items[0]["id"]))
    left, right = episodes
    games = [left.get("game"), right.get("game")]
    note = (None if games[0] == games[1] else
            f"these are episodes of different games ({a}: {games[0]}, {b}: {games[1]}): the same task id names "
            "different tasks, so the two are not comparable turn by turn")
    changes = [
        {"what": key, "a": left.get(key), "b": right.get(key)}
        for key in ("status", "reward", "num_turns", "error_stage")
        if left.get(key) != right.get(key)
    ]
    answer = [(e.get("outcome") or {}).get("final_answer") for e in episodes]
    if answer[0] != answer[1]:
        changes.append({"what": "final_answer", "a": answer[0], "b": answer[1]})
    last = [(e["turns"][-1]["response"] if e["turns"] else "") for e in episodes]
    diff = list(difflib.unified_diff(last[0].splitlines(), last[1].splitlines(), a, b, lineterm=""))
    return {"task_id": task_id, "a": a, "b": b, "episodes": episodes, "games": games, "note": note,
            "changes": changes, "last_response_diff": diff}

