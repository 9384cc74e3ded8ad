"""The Ray cluster a call plays on (``ray=ADDRESS`` or SPARRING_RAY_ADDRESS), checked first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.api.errors import InputError

if TYPE_CHECKING:
    from app.ray_workers import Cluster
    from app.settings import Settings


def ray_cluster(chosen: Settings, address: str | None) -> Cluster | None:
    """The cluster at ``address`` (else the settings'), checked before anything is played; None
    when neither names one. InputError saying what to fix when it cannot play."""
    address = address or chosen.ray_address
    if address is None:
        return None
    from app.ray_workers import RaySetupError, connect

    try:
        return connect(chosen, address)
    except RaySetupError as exc:
        raise InputError(str(exc)) from exc
