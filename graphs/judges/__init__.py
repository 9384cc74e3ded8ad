"""Judging: final-answer extraction, ground-truth verification, and parsers of critic and
judge outputs."""
