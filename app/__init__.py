"""User-facing entry points: CLI, settings."""
