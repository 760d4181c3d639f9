"""The token vault: each user's secrets for a workspace's security schemes (the tokens of their connection to an
API), in the registry's database, encrypted.

- **Encryption.** AES-256-GCM (the `cryptography` package), a random 96-bit nonce per write, and the entry's
  identity (workspace, scheme, issuer, subject) as associated data: a database dump or backup without the key
  reveals no token, and a row copied from one user to another does not decrypt (it reads as missing).
- **Keys.** `CRANK_VAULT_KEYS`: references (`env:NAME` or `file:/path`, comma-separated) to 32-byte keys, base64
  (`crank vault key` makes one). The first encrypts; every one listed decrypts. A key is never stored beside the
  data: a row records only its key's id (the first 8 bytes of the key's SHA-256, hex).
- **Rotation without downtime.** Put the new key first and keep the old one after it: new writes use the new
  key, old rows still decrypt, and `crank vault rotate` re-encrypts the old rows; then the old key may go.
- **A missing or wrong key** is a clear error where it matters: `check()` (at start) names a key id the rows need
  that the keys do not hold; the vault is never read or written in clear.

Every replica reads the same rows, so a connection made on one is used by all. Decrypted entries are cached by
their users (`crank.gateway`), not here.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import logging
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import Engine, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from crank import _json
from crank.exceptions import ConfigurationError, RegistryNotFoundError
from crank.references import read_reference
from crank.registry.models import VaultEntry, Workspace
from crank.types import JSONObject

__all__ = ["VAULT_KEYS_VARIABLE", "Vault", "VaultEntryInfo", "VaultKeys", "new_vault_key"]

logger = logging.getLogger("crank.registry")

VAULT_KEYS_VARIABLE: Final = "CRANK_VAULT_KEYS"
_KEY_BYTES = 32
_NONCE_BYTES = 12
_AAD_PREFIX = b"crank-vault/2\0"


def new_vault_key() -> str:
    """A new vault key, base64 (32 random bytes): what a reference of `CRANK_VAULT_KEYS` names."""
    return base64.urlsafe_b64encode(os.urandom(_KEY_BYTES)).decode()


class VaultKeys:
    """The vault's keys: the first encrypts, every one decrypts (rotation)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ConfigurationError(f"{VAULT_KEYS_VARIABLE} names no key")
        for key in keys:
            if len(key) != _KEY_BYTES:
                raise ConfigurationError(f"a vault key is {_KEY_BYTES} bytes, base64 (`crank vault key` makes one)")
        self._ciphers = {_key_id(key): AESGCM(key) for key in keys}
        self._keys = tuple(keys)
        self.current = _key_id(keys[0])

    @classmethod
    def from_references(cls, references: str) -> VaultKeys:
        """The keys `CRANK_VAULT_KEYS` names (comma-separated references); `ConfigurationError` saying which does
        not resolve or is not a key (never a key's value)."""
        keys = []
        for reference in (item.strip() for item in references.split(",")):
            if not reference:
                continue
            keys.append(_decoded_key(reference, read_reference(reference).strip()))
        return cls(keys)

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(self._ciphers)

    def derived(self, purpose: str) -> list[bytes]:
        """A key for `purpose` (signing connect links, say) from each vault key, the current one first (HKDF-SHA256):
        every replica given the same vault keys derives the same, and a rotation rotates them too."""
        return [HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=f"crank {purpose}".encode()).derive(key)
                for key in self._keys]  # fmt: skip

    def encrypt(self, plaintext: bytes, identity: bytes) -> tuple[str, bytes, bytes]:
        """(key id, nonce, ciphertext) of `plaintext`, bound to `identity`."""
        nonce = os.urandom(_NONCE_BYTES)
        return self.current, nonce, self._ciphers[self.current].encrypt(nonce, plaintext, identity)

    def decrypt(self, key_id: str, nonce: bytes, ciphertext: bytes, identity: bytes) -> bytes | None:
        """The plaintext; None when the row is not this identity's or was altered (`InvalidTag`).
        `ConfigurationError` for a key these keys do not hold."""
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise ConfigurationError(f"a vault row is encrypted with key {key_id}, which {VAULT_KEYS_VARIABLE} does "
                                     "not hold (put the key back, after the current one)")  # fmt: skip
        try:
            return cipher.decrypt(nonce, ciphertext, identity)
        except InvalidTag:
            return None


def _decoded_key(reference: str, value: str) -> bytes:
    """The key `reference` holds: 32 bytes, base64 (either alphabet, padding optional), strictly: a typo is an
    error naming the reference, never a key of other bytes."""
    padded = (value + "=" * (-len(value) % 4)).encode()
    try:
        key = base64.b64decode(padded.translate(bytes.maketrans(b"-_", b"+/")), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != _KEY_BYTES:
        raise ConfigurationError(f"{VAULT_KEYS_VARIABLE}: {reference!r} is not a {_KEY_BYTES}-byte base64 key "
                                 "(`crank vault key` makes one)")  # fmt: skip
    return key


def _key_id(key: bytes) -> str:
    return hashlib.sha256(key).digest()[:8].hex()


def _identity(workspace: str, scheme: str, issuer: str, subject: str) -> bytes:
    """The associated data binding a row to its user: each part length-prefixed, so that no two identities (a
    subject holding the separator, say) are the same bytes."""
    parts = [part.encode() for part in (workspace, scheme, issuer, subject)]
    return _AAD_PREFIX + b"".join(struct.pack(">I", len(part)) + part for part in parts)


@dataclass(frozen=True, slots=True)
class VaultEntryInfo:
    """What an entry says without its secret: whose, for which scheme, and when."""

    workspace: str
    scheme: str
    issuer: str
    subject: str
    key_id: str
    created_at: str
    updated_at: str

    def to_json(self) -> JSONObject:
        return {"workspace": self.workspace, "scheme": self.scheme, "issuer": self.issuer, "subject": self.subject,
                "created_at": self.created_at, "updated_at": self.updated_at}  # fmt: skip


class Vault:
    """The encrypted entries of one registry's database (synchronous: callers on an event loop run it in a
    thread, as every registry read)."""

    def __init__(self, engine: Engine, keys: VaultKeys | None) -> None:
        """`keys` None: the entries can be listed and removed (an operator's CLI), never read or written."""
        self.engine = engine
        self._keys = keys
        self._writer = engine.execution_options(crank_write=True)  # SQLite: the write lock from the start
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert

    @property
    def keys(self) -> VaultKeys:
        if self._keys is None:
            raise ConfigurationError(f"the vault's keys are not given ({VAULT_KEYS_VARIABLE})")
        return self._keys

    def put(self, workspace: str, scheme: str, issuer: str, subject: str, secret: JSONObject) -> None:
        """Keep `secret` for this user and scheme, replacing what was there: one upsert, so that two replicas
        writing the same user's entry at once both succeed (the last write stays)."""
        identity = _identity(workspace, scheme, issuer, subject)
        key_id, nonce, ciphertext = self.keys.encrypt(_json.dumps(secret), identity)
        now = datetime.datetime.now(datetime.UTC)
        with Session(self._writer) as session, session.begin():
            ws = _workspace_id(session, workspace)
            statement = self._insert(VaultEntry).values(
                workspace_id=ws, scheme=scheme, issuer=issuer, subject=subject, key_id=key_id, nonce=nonce,
                ciphertext=ciphertext, created_at=now, updated_at=now,
            )  # fmt: skip
            session.execute(statement.on_conflict_do_update(
                index_elements=["workspace_id", "scheme", "issuer", "subject"],
                set_={"key_id": key_id, "nonce": nonce, "ciphertext": ciphertext, "updated_at": now},
            ))  # fmt: skip

    def replace(self, workspace: str, scheme: str, issuer: str, subject: str, secret: JSONObject, *,
                version: bytes) -> bool:  # fmt: skip
        """Replace this user's secret only if their entry is still the one read at `version` (`read`): False when
        it was removed or written again meanwhile (a refresh never undoes a removal, nor overwrites a new
        connection with tokens of the old one)."""
        identity = _identity(workspace, scheme, issuer, subject)
        key_id, nonce, ciphertext = self.keys.encrypt(_json.dumps(secret), identity)
        now = datetime.datetime.now(datetime.UTC)
        with Session(self._writer) as session, session.begin():
            changed = session.execute(
                update(VaultEntry)
                .where(VaultEntry.workspace_id == _workspace_id(session, workspace), VaultEntry.scheme == scheme,
                       VaultEntry.issuer == issuer, VaultEntry.subject == subject, VaultEntry.nonce == version)
                .values(key_id=key_id, nonce=nonce, ciphertext=ciphertext, updated_at=now)
                .execution_options(synchronize_session=False)
            )  # fmt: skip
            return bool(changed.rowcount)  # type: ignore[attr-defined]

    def get(self, workspace: str, scheme: str, issuer: str, subject: str) -> JSONObject | None:
        """This user's secret for the scheme; None when there is none, or its row does not decrypt as theirs (an
        altered row, or one copied from another user: logged, never used)."""
        found = self.read(workspace, scheme, issuer, subject)
        return None if found is None else found[0]

    def read(self, workspace: str, scheme: str, issuer: str, subject: str) -> tuple[JSONObject, bytes] | None:
        """As `get`, with the entry's version (its nonce, new at every write), for `replace` and `delete`."""
        with Session(self.engine) as session:
            ws = _workspace_id(session, workspace)
            row = session.scalars(select(VaultEntry).filter_by(workspace_id=ws, scheme=scheme, issuer=issuer,
                                                               subject=subject)).one_or_none()  # fmt: skip
            if row is None:
                return None
            key_id, nonce, ciphertext = row.key_id, row.nonce, row.ciphertext
        plaintext = self.keys.decrypt(key_id, nonce, ciphertext, _identity(workspace, scheme, issuer, subject))
        if plaintext is None:
            logger.warning("vault: the entry of workspace %s, scheme %s does not decrypt as its user's (altered, or "
                           "copied from another user): not used", workspace, scheme)  # fmt: skip
            return None
        secret: JSONObject = _json.loads(plaintext)
        return secret, nonce

    def delete(self, workspace: str, *, scheme: str | None = None, issuer: str | None = None,
               subject: str | None = None, version: bytes | None = None) -> int:  # fmt: skip
        """Remove the workspace's entries of this scheme, issuer and subject (None: any), and only the one read at
        `version` when given (`read`); how many went."""
        with Session(self._writer) as session, session.begin():
            query = delete(VaultEntry).where(VaultEntry.workspace_id == _workspace_id(session, workspace))
            for column, value in ((VaultEntry.scheme, scheme), (VaultEntry.issuer, issuer),
                                  (VaultEntry.subject, subject), (VaultEntry.nonce, version)):  # fmt: skip
                if value is not None:
                    query = query.where(column == value)
            return int(session.execute(query).rowcount)  # type: ignore[attr-defined]

    def entries(self, workspace: str | None = None, *, scheme: str | None = None,
                subject: str | None = None) -> list[VaultEntryInfo]:  # fmt: skip
        """The entries (never their secrets), of one workspace or all, by scheme and subject."""
        with Session(self.engine) as session:
            query = select(VaultEntry, Workspace.slug).join(Workspace, Workspace.id == VaultEntry.workspace_id)
            if workspace is not None:
                query = query.where(Workspace.slug == workspace)
            if scheme is not None:
                query = query.where(VaultEntry.scheme == scheme)
            if subject is not None:
                query = query.where(VaultEntry.subject == subject)
            rows = session.execute(query.order_by(Workspace.slug, VaultEntry.scheme, VaultEntry.subject)).all()
            return [VaultEntryInfo(slug, row.scheme, row.issuer, row.subject, row.key_id, row.created_at.isoformat(),
                                   row.updated_at.isoformat()) for row, slug in rows]  # fmt: skip

    def check(self) -> None:
        """`ConfigurationError` when a row is encrypted with a key these keys do not hold: said at start, not at a
        user's first call."""
        with Session(self.engine) as session:
            used = set(session.scalars(select(VaultEntry.key_id).distinct()))
        missing = sorted(used - self.keys.ids)
        if missing:
            raise ConfigurationError(f"the vault has rows encrypted with key(s) {', '.join(missing)}, which "
                                     f"{VAULT_KEYS_VARIABLE} does not hold: put them back (after the current "
                                     "key) to read those rows")  # fmt: skip

    def rotate(self) -> int:
        """Re-encrypt every row not under the current key with it (after `check`), each in its own short
        transaction and only if it is still what was read (a user's fresh `put` meanwhile wins); how many were."""
        with Session(self.engine) as session:
            stale = session.execute(
                select(VaultEntry.id, VaultEntry.scheme, VaultEntry.issuer, VaultEntry.subject, VaultEntry.key_id,
                       VaultEntry.nonce, VaultEntry.ciphertext, Workspace.slug)
                .join(Workspace, Workspace.id == VaultEntry.workspace_id)
                .where(VaultEntry.key_id != self.keys.current)
            ).all()  # fmt: skip
        rotated = 0
        for row in stale:
            identity = _identity(row.slug, row.scheme, row.issuer, row.subject)
            plaintext = self.keys.decrypt(row.key_id, row.nonce, row.ciphertext, identity)
            if plaintext is None:
                continue  # not its user's: left as it is, never used
            key_id, nonce, ciphertext = self.keys.encrypt(plaintext, identity)
            with Session(self._writer) as session, session.begin():
                changed = session.execute(
                    update(VaultEntry).where(VaultEntry.id == row.id, VaultEntry.nonce == row.nonce)
                    .values(key_id=key_id, nonce=nonce, ciphertext=ciphertext)
                    .execution_options(synchronize_session=False)
                )  # fmt: skip
                rotated += int(changed.rowcount)  # type: ignore[attr-defined]
        return rotated


def _workspace_id(session: Session, slug: str) -> str:
    found = session.scalars(select(Workspace.id).filter_by(slug=slug)).one_or_none()
    if found is None:
        raise RegistryNotFoundError(f"no workspace {slug!r}")
    return found
