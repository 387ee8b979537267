"""Who a request is, and so what it may do (issue 12 §5 and §8).

- With API keys set, every endpoint but the health ones needs one of them (or the admin key)
  as `Authorization: Bearer <key>`; each key is an identity that owns the tasks it submits,
  and who asks in fair shares, limits, logs and the ledger: its name (`[host.keys]`, a keys
  file), else `key<N>`. Without a key, a client is its address (`http:127.0.0.1`).
- Engine management (add, remove, drain, resume, reload) changes what every client gets, so
  it needs the admin key. A host without one keeps it to a loopback bind, where only users of
  this machine reach it, and refuses it on any other.
- A task is cancelled or read by its owner or an admin; with no key in play, by anyone
  holding its (unguessable) id.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastapi import Depends, Request
from pydantic import BaseModel

from ...paths import list_entries
from ...protocol.errors import ErrorKind, InferError

log = logging.getLogger(__name__)

ADMIN = "admin"


def _bearer(key: str) -> bytes:
    return f"Bearer {key}".encode()


class Access:
    def __init__(
        self,
        api_keys: Sequence[str] = (),
        admin_key: str | None = None,
        *,
        loopback: bool = True,
        named: Mapping[str, str] | None = None,
    ) -> None:
        self._keys = [(name, _bearer(key)) for name, key in (named or {}).items()]
        self._keys += [(f"key{n}", _bearer(key)) for n, key in enumerate(api_keys)]
        self._admin = _bearer(admin_key) if admin_key else None
        self.loopback = loopback  # the host listens on a loopback address only
        holders: dict[bytes, str] = {self._admin: ADMIN} if self._admin else {}
        for name, key in self._keys:  # one key, one person: else the first one is every one
            if key in holders:
                raise InferError(
                    ErrorKind.INVALID_PARAMS,
                    f"{holders[key]} and {name} have the same key: each needs a key of their "
                    "own, or the host counts one's work as the other's",
                )
            holders[key] = name
        if self._keys and self._admin is None and loopback:  # documented, but easy to miss
            log.warning(
                "API keys but no admin key on a loopback address: every key may manage the "
                "engines and the library (and read everyone's usage); --admin-key keeps that "
                "to its holder"
            )

    @property
    def keys_required(self) -> bool:
        return bool(self._keys)

    @property
    def admin_key_set(self) -> bool:
        return self._admin is not None

    def identity(self, authorization: bytes) -> str | None:
        """`admin`, a named key's name, `key<N>` for the N-th unnamed API key, or None (no
        key, or one not ours)."""
        if self._admin is not None and hmac.compare_digest(authorization, self._admin):
            return ADMIN
        for name, key in self._keys:
            if hmac.compare_digest(authorization, key):
                return name
        return None

    def accepts(self, authorization: bytes) -> bool:
        """Past the API-key gate: no keys are set, or the request carries one of them."""
        return not self._keys or self.identity(authorization) is not None

    def owner(self, request: Request) -> str | None:
        """Whom a task submitted by this request belongs to; None with no key in play."""
        return self.identity(_authorization(request))

    def who(self, request: Request) -> str:
        """Who asks, for fair shares, limits, logs and the ledger: its key's name, else its
        address."""
        return self.owner(request) or address_of(request)

    def is_admin(self, request: Request) -> bool:
        if self._admin is None:
            return self.loopback
        return self.identity(_authorization(request)) == ADMIN

    def check_admin(self, request: Request) -> None:
        if self.is_admin(request):
            return
        # (who tried what, for a shared box's trail: a key's name, never the key)
        log.info("refused %s %s to %s: not the admin", request.method, request.url.path,
                 self.who(request))  # fmt: skip
        if self._admin is None:
            raise InferError(
                ErrorKind.FORBIDDEN,
                "managing engines and the library is off: this host listens beyond loopback "
                "without an admin key (start it with --admin-key or INFERTUI_ADMIN_KEY)",
            )
        if not _authorization(request):
            raise InferError(
                ErrorKind.UNAUTHORIZED,
                "managing engines and the library needs the admin key: send Authorization: "
                "Bearer <admin key>",
            )
        raise InferError(
            ErrorKind.FORBIDDEN, "managing engines and the library needs the admin key"
        )

    def check_owner(self, request: Request, owner: str | None, what: str) -> None:
        """The task's owner and admins pass; anyone else is refused (403)."""
        if owner is None or self.owner(request) == owner or self.is_admin(request):
            return
        raise InferError(ErrorKind.FORBIDDEN, f"{what} belongs to another API key")


def address_of(request: Request) -> str:
    peer = request.client
    return f"http:{peer.host}" if peer else "http"


def read_keys_file(path: Path) -> dict[str, str]:
    """Named API keys, one `NAME=KEY` a line, `#` comments; a bad line is an error naming it."""
    keys: dict[str, str] = {}
    for number, entry in list_entries(path, "keys file"):
        name, equals, key = (part.strip() for part in entry.partition("="))
        if not (equals and name and key):
            raise InferError(ErrorKind.INVALID_PARAMS, f"{path}:{number}: expected NAME=KEY")
        keys[name] = key
    return keys


def _authorization(request: Request) -> bytes:
    return request.headers.get("authorization", "").encode("latin-1")


def access_of(request: Request) -> Access:
    access: Access = request.app.state.access
    return access


def require_admin(request: Request) -> None:
    """A route dependency: engine management is for admins only."""
    access_of(request).check_admin(request)


def admin_refusals(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """What an admin-only route may answer before it runs, for its OpenAPI `responses`."""
    return {
        401: {"model": model, "description": "the admin key is set and was not sent"},
        403: {"model": model, "description": "not the admin key, or no admin key beyond loopback"},
    }


ADMIN_ONLY = [Depends(require_admin)]  # a route's `dependencies`: engine management
