"""Which policy a request's model name picks.

``base``: the base model, no adapter. ``ROLE``: the role's active adapter version, read from
the registry on every request, so a deploy (by any process) switches new requests to the new
version while requests in flight finish on theirs. ``ROLE@vN``: that version, pinned. Any other
name, a role without an active version, or a verifier (a reward model, not a policy) is a 404
that lists the names served; a version whose folder is missing or changed, or that the backend
cannot load, is a 409 (``adapter_unavailable``): never a silent fallback to the base model or to
another version. A version is checked and loaded the first time it is asked for, then stays
loaded: a request holds the version it was placed with until it is answered.

``served`` (GET /v1/models) lists only what can be served: the loaded versions, and the others
whose folder passes the registry's checks and whose last load here did not fail (both remembered
while the folder's files stay as they are); a role only when its active version is listed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine

from app.gateway.errors import GatewayError
from app.wiring import PolicyFactory
from graphs.policies.adapter_folder import AdapterFolderError
from graphs.policies.base import BackendError
from graphs.policies.policy import Policy
from storage.models import AdapterStatus
from training.adapter_folders import verify_folder
from training.registry import AdapterRecord, UnknownVersionError, active_version, get_version, list_versions

BASE = "base"


@dataclass
class ModelNames:
    """Model names -> policies, over the factory that ``sparring play`` uses (one shared backend)."""

    factory: PolicyFactory
    engine: Engine
    _policies: dict[str, Policy] = field(default_factory=dict)
    """loaded adapter versions (and the base) by name: loading happens once"""
    _checked: dict[str, tuple[tuple[object, ...], bool]] = field(default_factory=dict)
    """version -> (its folder's files when checked, whether it can be served): a load that fails says no"""

    async def policy(self, name: str) -> Policy:
        """The policy serving ``name`` now (GatewayError 404 for a name not served)."""
        record = None if name == BASE else await asyncio.to_thread(self._record, name)
        key = BASE if record is None else record.name
        if key not in self._policies:
            try:
                self._policies[key] = await self.factory.policy(
                    key.partition("@")[0], "model:base" if key == BASE else f"model:{key}")
            except (AdapterFolderError, BackendError) as exc:
                if record is not None:
                    self._checked[key] = (_files(record.path), False)
                raise _unavailable(name, key, exc) from exc
        return self._policies[key]

    def served(self) -> list[str]:
        """``base``, every role whose active version can be served, then every policy version
        (``ROLE@vN``) that can be: a version whose folder is missing or broken, or whose load
        failed, is left out (asking for it is the 409 that says why)."""
        versions = [v for v in list_versions(self.engine) if not v.is_verifier and self._servable(v)]
        roles = sorted({v.role for v in versions if v.status == AdapterStatus.ACTIVE})
        return [BASE, *roles, *(v.name for v in versions)]

    def _servable(self, record: AdapterRecord) -> bool:
        if record.name in self._policies:
            return True
        files = _files(record.path)
        known = self._checked.get(record.name)
        if known is None or known[0] != files:
            try:
                verify_folder(record.path, base_model=self.factory.settings.model, status=record.status)
                known = (files, True)
            except AdapterFolderError:
                known = (files, False)
            self._checked[record.name] = known
        return known[1]

    def _record(self, name: str) -> AdapterRecord:
        if "@" in name:
            try:
                record = get_version(self.engine, name)
            except UnknownVersionError:
                raise self._unknown(name, "no adapter version has that name") from None
        else:
            record = active_version(self.engine, name)
            if record is None:
                raise self._unknown(name, "no role of that name has an active version (promote one with "
                                    f"`sparring adapters promote {name}@vN`, or name a version)")
        if record.is_verifier:
            raise self._unknown(name, "it is a verifier (a reward model), not a policy")
        return record

    def _unknown(self, name: str, why: str) -> GatewayError:
        return GatewayError(404, f"model {name[:100]!r} is not served: {why}. Served: {', '.join(self.served())}",
                            "model_not_found", "model")


def _files(folder: Path) -> tuple[object, ...]:
    """The folder's files with their sizes and modification times (empty when it is missing)."""
    if not folder.is_dir():
        return ()
    return tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in folder.iterdir() if f.is_file()))


def _unavailable(name: str, version: str, exc: Exception) -> GatewayError:
    """409: ``version``, the one ``name`` picks, is registered but cannot be loaded (its folder is
    missing or changed, or the backend cannot load it). Another version or the base model answering
    instead would log its reply as one of ``version``'s."""
    which = "" if name == version else f" (its active version {version})"
    return GatewayError(409, f"model {name!r} cannot be served{which}: {str(exc).rstrip('.')}. Nothing else is "
                        "served in its place (neither another version nor the base model)", "adapter_unavailable",
                        "model")
