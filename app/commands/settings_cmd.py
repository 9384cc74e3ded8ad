"""`sparring settings`: the effective settings."""

from __future__ import annotations

from app.commands.common import FormatOption, settings_or_exit
from app.output import Format, emit
from app.settings import Settings


def settings(fmt: FormatOption = Format.table) -> None:
    """Show the effective settings and where each can be changed.

    Example: `SPARRING_DEVICE=cuda sparring settings`
    """
    current = settings_or_exit()
    rows = [
        {
            "setting": name,
            "value": str(getattr(current, name)),
            "env": f"SPARRING_{name.upper()}",
            "help": field.description,
        }
        for name, field in Settings.model_fields.items()
    ]
    emit(rows, fmt, title="settings")
