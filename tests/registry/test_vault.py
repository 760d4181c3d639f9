"""The token vault (`crank.registry.vault`) on SQLite and PostgreSQL: what it writes is ciphertext bound to its
user, a copied or altered row never decrypts, a missing key is a clear error, and a rotation keeps every row
readable while it runs."""

from __future__ import annotations

import base64
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from crank.exceptions import ConfigurationError
from crank.registry import Registry
from crank.registry.vault import Vault, VaultKeys, new_vault_key

ISSUER = "https://id.example.com"
SECRET = {"access_token": "alice-access-token-0123456789", "refresh_token": "alice-refresh-0123456789"}


def _keys(*encoded: str) -> VaultKeys:
    return VaultKeys([base64.urlsafe_b64decode(key) for key in encoded])


@pytest.fixture
def vault(registry: Registry) -> Vault:
    registry.create_workspace("acme", "Acme")
    registry.create_workspace("other", "Other")
    return Vault(registry.engine, _keys(new_vault_key()))


def test_a_secret_is_kept_encrypted_and_read_back_by_its_user(vault: Vault) -> None:
    vault.put("acme", "people", ISSUER, "alice", SECRET)
    assert vault.get("acme", "people", ISSUER, "alice") == SECRET
    assert vault.get("acme", "people", ISSUER, "bob") is None
    assert vault.get("acme", "other-scheme", ISSUER, "alice") is None
    with vault.engine.connect() as connection:  # what a dump of the database holds: no token, anywhere
        rows = connection.execute(text("SELECT * FROM vault_entries")).all()
    dumped = repr(rows).encode() + b"".join(bytes(value) for row in rows for value in row if isinstance(value, bytes))
    assert len(rows) == 1 and b"alice-access-token" not in dumped and b"alice-refresh" not in dumped
    vault.put("acme", "people", ISSUER, "alice", {**SECRET, "access_token": "renewed"})  # replaced, not added
    assert vault.get("acme", "people", ISSUER, "alice")["access_token"] == "renewed"  # type: ignore[index]
    assert [entry.subject for entry in vault.entries("acme")] == ["alice"]


def test_a_write_or_removal_by_version_touches_only_the_row_that_was_read(vault: Vault) -> None:
    vault.put("acme", "people", ISSUER, "alice", SECRET)
    read = vault.read("acme", "people", ISSUER, "alice")
    assert read is not None and read[0] == SECRET
    assert vault.replace("acme", "people", ISSUER, "alice", {"access_token": "one"}, version=read[1])
    assert not vault.replace("acme", "people", ISSUER, "alice", {"access_token": "two"}, version=read[1])  # stale
    assert vault.get("acme", "people", ISSUER, "alice") == {"access_token": "one"}
    assert vault.delete("acme", scheme="people", subject="alice", version=read[1]) == 0  # written since: kept
    current = vault.read("acme", "people", ISSUER, "alice")
    assert current is not None and vault.delete("acme", scheme="people", subject="alice", version=current[1]) == 1
    assert not vault.replace("acme", "people", ISSUER, "alice", SECRET, version=current[1])  # removed: stays so
    assert vault.get("acme", "people", ISSUER, "alice") is None


def test_a_row_copied_to_another_user_or_altered_never_decrypts(vault: Vault, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="crank.registry")
    vault.put("acme", "people", ISSUER, "alice", SECRET)
    vault.put("acme", "people", ISSUER, "bob", {"access_token": "bob-token"})
    with vault.engine.begin() as connection:  # mallory, with write access to the database, swaps the two rows
        connection.execute(text("UPDATE vault_entries SET subject = 'tmp' WHERE subject = 'alice'"))
        connection.execute(text("UPDATE vault_entries SET subject = 'alice' WHERE subject = 'bob'"))
        connection.execute(text("UPDATE vault_entries SET subject = 'bob' WHERE subject = 'tmp'"))
    assert vault.get("acme", "people", ISSUER, "alice") is None and vault.get("acme", "people", ISSUER, "bob") is None
    assert "does not decrypt as its user's" in caplog.text and "alice-access-token" not in caplog.text
    vault.put("acme", "people", ISSUER, "carol", {"access_token": "carol-token"})
    with vault.engine.begin() as connection:
        (ciphertext,) = connection.execute(text("SELECT ciphertext FROM vault_entries WHERE subject = 'carol'")).one()
        flipped = bytes([ciphertext[0] ^ 1]) + bytes(ciphertext[1:])
        connection.execute(text("UPDATE vault_entries SET ciphertext = :c WHERE subject = 'carol'"), {"c": flipped})
    assert vault.get("acme", "people", ISSUER, "carol") is None


def test_a_missing_key_is_a_clear_error_and_a_rotation_keeps_every_row_readable(vault: Vault) -> None:
    old = new_vault_key()
    before = Vault(vault.engine, _keys(old))
    before.put("acme", "people", ISSUER, "alice", SECRET)
    new = new_vault_key()
    without_old = Vault(vault.engine, _keys(new))
    with pytest.raises(ConfigurationError, match=f"key {new_id(old)}, which CRANK_VAULT_KEYS does not hold"):
        without_old.get("acme", "people", ISSUER, "alice")
    with pytest.raises(ConfigurationError, match=new_id(old)):
        without_old.check()
    # The new key first, the old one after it: old rows read, new writes use the new key, then `rotate`.
    rotating = Vault(vault.engine, _keys(new, old))
    rotating.check()
    assert rotating.get("acme", "people", ISSUER, "alice") == SECRET
    rotating.put("acme", "people", ISSUER, "bob", {"access_token": "bob"})
    assert {entry.subject: entry.key_id for entry in rotating.entries()} == {"alice": new_id(old), "bob": new_id(new)}
    assert rotating.rotate() == 1
    without_old.check()  # every row is under the new key now: the old one may go
    assert without_old.get("acme", "people", ISSUER, "alice") == SECRET


def test_entries_are_listed_and_removed_by_workspace_scheme_and_user(vault: Vault) -> None:
    vault.put("acme", "people", ISSUER, "alice", SECRET)
    vault.put("acme", "mail", ISSUER, "alice", SECRET)
    vault.put("acme", "people", ISSUER, "bob", SECRET)
    vault.put("other", "people", ISSUER, "alice", SECRET)
    assert [(e.workspace, e.scheme, e.subject) for e in vault.entries(subject="alice")] == [
        ("acme", "mail", "alice"), ("acme", "people", "alice"), ("other", "people", "alice")]  # fmt: skip
    assert vault.delete("acme", subject="alice") == 2
    assert [(e.workspace, e.subject) for e in vault.entries()] == [("acme", "bob"), ("other", "alice")]
    assert vault.delete("acme", scheme="people", subject="bob") == 1 and vault.delete("acme") == 0


def test_keys_come_by_reference_and_a_wrong_one_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    key = new_vault_key()
    monkeypatch.setenv("VAULT_KEY_NEW", key)
    monkeypatch.setenv("VAULT_KEY_SHORT", base64.urlsafe_b64encode(b"short").decode())
    assert VaultKeys.from_references("env:VAULT_KEY_NEW").current == new_id(key)
    with pytest.raises(ConfigurationError, match="'env:VAULT_KEY_SHORT' is not a 32-byte base64 key"):
        VaultKeys.from_references("env:VAULT_KEY_NEW, env:VAULT_KEY_SHORT")
    # A typo is an error naming the reference, never a key of other bytes (lenient base64 would drop the '!').
    monkeypatch.setenv("VAULT_KEY_TYPO", key[:20] + "!" + key[20:])
    with pytest.raises(ConfigurationError, match="'env:VAULT_KEY_TYPO' is not a 32-byte base64 key") as typo:
        VaultKeys.from_references("env:VAULT_KEY_TYPO")
    assert key[:20] not in str(typo.value)
    monkeypatch.setenv("VAULT_KEY_UNPADDED", key.rstrip("="))  # padding is optional
    assert VaultKeys.from_references("env:VAULT_KEY_UNPADDED").current == new_id(key)
    with pytest.raises(ConfigurationError, match="'VAULT_KEY_GONE' is not set") as missing:
        VaultKeys.from_references("env:VAULT_KEY_GONE")
    assert key not in str(missing.value)
    with pytest.raises(ConfigurationError, match="names no key"):
        VaultKeys.from_references(" , ")


def new_id(encoded: str) -> str:
    return _keys(encoded).current


def test_replicas_writing_one_users_entry_at_once_all_succeed_and_one_write_stays(vault: Vault) -> None:
    """Two replicas refreshing the same user's token at the same moment: one upsert each, no unique-key error."""
    writers = [Vault(vault.engine, vault.keys) for _ in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda pair: pair[1].put("acme", "people", ISSUER, "alice", {"access_token": f"t{pair[0]}"}),
                      enumerate(writers)))  # fmt: skip
    assert len(vault.entries("acme")) == 1
    kept = vault.get("acme", "people", ISSUER, "alice")
    assert kept is not None and kept["access_token"] in {f"t{n}" for n in range(8)}


def test_a_rotation_never_undoes_a_write_made_while_it_runs(vault: Vault) -> None:
    old, new = new_vault_key(), new_vault_key()
    Vault(vault.engine, _keys(old)).put("acme", "people", ISSUER, "alice", SECRET)
    rotating = Vault(vault.engine, _keys(new, old))
    stale = rotating.entries("acme")
    # A user's fresh token lands (under the old key, by a replica not yet given the new one) after the rotation
    # read the row: the rotation's compare-and-set leaves the fresh row alone.
    original_decrypt = rotating.keys.decrypt

    def write_meanwhile(*args: object) -> bytes | None:
        Vault(vault.engine, _keys(old)).put("acme", "people", ISSUER, "alice", {"access_token": "fresh"})
        return original_decrypt(*args)  # type: ignore[arg-type]

    rotating.keys.decrypt = write_meanwhile  # type: ignore[method-assign]
    assert len(stale) == 1 and rotating.rotate() == 0
    rotating.keys.decrypt = original_decrypt  # type: ignore[method-assign]
    assert rotating.get("acme", "people", ISSUER, "alice") == {"access_token": "fresh"}
    assert rotating.rotate() == 1
