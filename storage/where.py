"""A filter's conditions on episodes (storage.queries.EpisodeFilter): on the episode's own
columns, and on its turns ("has a turn that ..."), which SQL can say two ways:

* ``EXISTS`` (correlated): each episode's turns are looked up through the turns' episode
  index as the episodes come, so the first rows come at once;
* ``IN`` (``episodes.id IN (SELECT episode_id FROM turns WHERE ...)``): the set of such
  episodes is built first, through the turns' own index (``seat``, ``policy``), then each
  episode is looked up in it: more before the first row, less for all of them.

At 1M turns on SQLite (CPU time, shared machine, 2026-11-24), newest first: the first 50
episodes with a debater_b turn take 3 ms with ``EXISTS``, 125 ms with ``IN``; all 49,953 of
them 480 ms and 200 ms (with a turn of the policy ``stubborn``: 6 and 200 ms, 850 and 280
ms). PostgreSQL likewise: a nested-loop semi-join for ``EXISTS``, a hash join for ``IN``
(storage.search_page).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlalchemy import ColumnElement, exists, select

from storage.tables import EPISODES as _E
from storage.tables import TURNS as _T


@dataclass
class Where:
    episode: list[ColumnElement[bool]] = field(default_factory=list)
    """conditions on the episode's columns"""
    turn: list[ColumnElement[bool]] = field(default_factory=list)
    """the episode has a turn that meets all of them"""

    def also(self, *episode: ColumnElement[bool]) -> Where:
        """These conditions on the episode's columns as well."""
        return replace(self, episode=[*self.episode, *episode])

    def exists(self) -> list[ColumnElement[bool]]:
        """As conditions on episodes, the turns' as ``EXISTS``: for the first rows of many."""
        if not self.turn:
            return [*self.episode]
        return [*self.episode, exists().where(_T.c.episode_id == _E.c.id, *self.turn)]

    def in_(self) -> list[ColumnElement[bool]]:
        """As conditions on episodes, the turns' as ``IN``: for reading most of the rows."""
        if not self.turn:
            return [*self.episode]
        # OFFSET 0 keeps PostgreSQL from flattening the IN into the semi-join it makes of EXISTS
        # (looking each episode's turns up); SQLite plans it the same either way
        return [*self.episode, _E.c.id.in_(select(_T.c.episode_id).where(*self.turn).offset(0))]
