"""Metrics computed from the store, ratings, comparisons and reports."""
