"""The options of the retrieval game."""

from __future__ import annotations

from dataclasses import dataclass

from graphs.options import GameOptions
from graphs.retrieval.corpus import corpus_for


@dataclass(frozen=True)
class RetrievalOptions(GameOptions):
    searches: int = 2
    """most searches the researcher makes itself before it must answer"""
    first_search: bool = True
    """search the question itself before the researcher's first turn (free: its results come with the question)"""
    results: int = 3
    """documents each search shows, best first"""
    distractors: int = 1
    """near-miss documents the planter adds to each episode's search index (0: no planter)"""
    corpus: str = ""
    """a JSONL corpus to search, one {"id", "title", "text"} per line (default: the shipped encyclopedia)"""

    def __post_init__(self) -> None:
        for name, least in (("searches", 0), ("results", 1), ("distractors", 0)):
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be >= {least}, got {getattr(self, name)}")
        if self.corpus:  # a corpus that does not parse is refused before anything is played
            corpus_for(self.corpus)
