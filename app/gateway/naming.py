"""Which policy a request's model name picks.

``base``: the base model, no adapter. ``ROLE``: the role's active adapter version, read from
the registry on every request, so a deploy (by any process) switches new requests to the new
version while requests in flight finish on theirs. ``ROLE@vN``: that version, pinned. Any other
name, a role without an active version, or a verifier (a reward model, not a policy) is a 404
that lists the names served; a version whose folder is missing or changed, or that the backend
cannot load, is a 409 (``adapter_unavailable``): never a silent fallback to the base model or to
another version. A version is checked and loaded the first time it is asked for, then stays
loaded: a request holds the version it was placed with until it is answered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sqlalchemy import Engine

from app.gateway.errors import GatewayError
from app.wiring import PolicyFactory
from graphs.policies.adapter_folder import AdapterFolderError
from graphs.policies.base import BackendError
from graphs.policies.policy import Policy
from storage.models import AdapterStatus
from training.registry import AdapterRecord, UnknownVersionError, active_version, get_version, list_versions

BASE = "base"


@dataclass
class ModelNames:
    """Model names -> policies, over the factory that ``sparring play`` uses (one shared backend)."""

    factory: PolicyFactory
    engine: Engine
    _policies: dict[str, Policy] = field(default_factory=dict)
    """loaded adapter versions (and the base) by name: loading happens once"""

    async def policy(self, name: str) -> Policy:
        """The policy serving ``name`` now (GatewayError 404 for a name not served)."""
        key = BASE if name == BASE else (await asyncio.to_thread(self._record, name)).name
        if key not in self._policies:
            try:
                self._policies[key] = await self.factory.policy(
                    key.partition("@")[0], "model:base" if key == BASE else f"model:{key}")
            except (AdapterFolderError, BackendError) as exc:
                raise _unavailable(name, key, exc) from exc
        return self._policies[key]

    def served(self) -> list[str]:
        """``base``, every role with an active version, then every policy version (``ROLE@vN``)."""
        versions = [v for v in list_versions(self.engine) if not v.is_verifier]
        roles = sorted({v.role for v in versions if v.status == AdapterStatus.ACTIVE})
        return [BASE, *roles, *(v.name for v in versions)]

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


def _unavailable(name: str, version: str, exc: Exception) -> GatewayError:
    """409: ``version``, the one ``name`` picks, is registered but cannot be loaded (its folder is
    missing or changed, or the backend cannot load it). Another version or the base model answering
    instead would log its reply as one of ``version``'s."""
    which = "" if name == version else f" (its active version {version})"
    return GatewayError(409, f"model {name!r} cannot be served{which}: {str(exc).rstrip('.')}. Nothing else is "
                        "served in its place (neither another version nor the base model)", "adapter_unavailable",
                        "model")
