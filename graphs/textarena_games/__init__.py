"""textarena: two-player games of the TextArena library (``textarena`` on PyPI) played as a
sparring game: textarena runs the rules, sparring's seats make the moves.

The package is named ``textarena_games`` so that it never shadows the ``textarena`` import.
"""
