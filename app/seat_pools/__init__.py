"""Seat pools: a seat filled per episode from a ``pool:`` or ``schedule:`` of policies
(non-stationary context agents; docs/playing.md).

``spec`` parses the seat specs and draws each episode's member from its seed; ``resolve``
finds the members in the store (a role's adapter history, rated weights) and loads their
policies, once for `sparring play` and every round for `sparring retrain`.
"""
