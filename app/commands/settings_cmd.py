"""`sparring settings`: the effective settings, secrets masked."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from app.commands.common import FormatOption, settings_or_exit
from app.output import Format, emit
from app.settings import Settings

MASK = "****"


def mask_url(url: str) -> str:
    """``scheme://user:****@host/...``: a URL with its password (and any key or token in its
    query) masked; other text unchanged."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}{':' + MASK if sep else ''}@{host}"
    query = "&".join(
        f"{key}={MASK}" if sep and any(word in key.lower() for word in ("key", "token", "password", "secret")) else item
        for item in parts.query.split("&") if item
        for key, sep, _ in [item.partition("=")]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def shown(value: Any) -> str:
    """A setting's value as `sparring settings` prints it: secrets masked (set or not is shown)."""
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else ""
    if isinstance(value, str) and "://" in value:
        return mask_url(value)
    return str(value)


def resolved(current: Settings) -> dict[str, str]:
    """What the precisions left to "auto" stand for on this machine: "auto (here: float32)"."""
    from graphs.policies.base_models import resolve_device, resolve_dtype

    here = {
        "dtype": str(resolve_dtype(current.dtype, resolve_device(current.device), serving=True,
                                   cache_dir=current.cache_dir)).removeprefix("torch."),
        "eval_dtype": current.deciding_dtype,
    }
    return {name: f"auto (here: {value})" for name, value in here.items() if getattr(current, name) == "auto"}


def settings(fmt: FormatOption = Format.table) -> None:
    """Show the effective settings and where each can be changed (passwords and keys masked);
    a precision left to auto also says what it is on this machine.

    Example: `SPARRING_DEVICE=cuda sparring settings`
    """
    current = settings_or_exit()
    here = resolved(current)
    rows = [
        {
            "setting": name,
            "value": here.get(name) or shown(getattr(current, name)),
            "env": f"SPARRING_{name.upper()}",
            "help": field.description,
        }
        for name, field in Settings.model_fields.items()
    ]
    emit(rows, fmt, columns=["env", "value", "help"], title="settings")
