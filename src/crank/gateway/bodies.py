"""The body of an http call, written as its operation's `BodyConfig` (crank.registry.runtime) says.

- **json**: the mapped body as JSON, sent with the configured media type (`application/json` for a wildcard).
- **form** (`application/x-www-form-urlencoded`): the body is an object; each field is a pair. A string goes as
  it is, a number or boolean as JSON writes it (`true`, `3`), and null leaves the field out. An array repeats its
  field (`tag=a&tag=b`) and an object's properties go as pairs of their own (OpenAPI's default, `style: form`
  with `explode`; a property named like another field is refused). A field in `deep_objects` goes as OpenAPI's
  `deepObject`: `address[city]=Oslo`, nested as deep as the value (`items[0][price]=p_1`), the form Stripe, Rails
  and PHP read; a key holding `[` or `]` is refused, since a server would read it as another field.
- **multipart** (`multipart/form-data`, RFC 7578): one part per field, or per item of an array; an object, or an
  array of objects, is one `application/json` part. A field in `files` is a file part: its value is standard
  base64, or a `data:` URL (RFC 2397) that may name the file (`data:image/png;name=cat.png;base64,...`, as
  react-jsonschema-form writes them); the part takes the URL's media type and name, else
  `application/octet-stream` and the field's name.
- **text** (`text/*`, XML): the body is a string, sent as UTF-8 (`charset=utf-8`, whatever the description named).
- **binary** (any other media type): the body is one file as above; a media type with a wildcard (`image/*`)
  is sent as the `data:` URL's own type, which must match it.

Files are never read from anywhere: a value that is not base64 or a `data:` URL is refused. A form's or multipart
body's written size (its pairs before percent-encoding, its parts with their files decoded) and a file body hold
at most `MAX_UPLOAD_BYTES`, counted as they are made, so that a short key repeated over many values cannot make a
large body; a file is refused on its encoded length before it is decoded. Over the bound, a file is
`file_too_large` and the fields `arguments_too_large`. A wrong value is a recoverable `MappingError` that names the
field and what to send instead.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, unquote_to_bytes, urlencode

from crank import _json
from crank.exceptions import MappingError
from crank.registry.runtime import MAX_UPLOAD_BYTES, BodyConfig, media_type_problem

__all__ = ["FILE_ARGUMENT", "BodyWriter", "File", "decode_file"]

_OCTET_STREAM = "application/octet-stream"
_FILE_HINT = "standard base64, or a data: URL such as data:image/png;name=cat.png;base64,iVBORw0K..."
FILE_ARGUMENT = f"A file: its content as {_FILE_HINT}"
"""How to pass a file, first in the description of every argument that takes one (the importer writes it)."""


@dataclass(frozen=True)
class File:
    """A file a call sends: its bytes, and the media type and name its `data:` URL gave (None otherwise)."""

    content: bytes
    media_type: str | None = None
    name: str | None = None


class BodyWriter:
    """The bytes and `Content-Type` of one operation's bodies; built once per published version."""

    def __init__(self, config: BodyConfig) -> None:
        self.content_type = config.content_type
        # What goes in the `Content-Type` header: JSON under a wildcard (`*/*`, `application/*+json`) says any JSON
        # will do, and goes as plain JSON; text goes as UTF-8, whatever charset the description named.
        self._sent_type = {"json": "application/json" if "*" in config.content_type else config.content_type,
                           "text": _utf8(config.content_type)}.get(config.kind, config.content_type)  # fmt: skip
        self._deep = frozenset(config.deep_objects)
        self._files = frozenset(config.files)
        writers: dict[str, Callable[[Any], tuple[bytes, str]]] = {
            "json": self._json, "form": self._form, "multipart": self._multipart, "text": self._text,
            "binary": self._binary,
        }  # fmt: skip
        self.write = writers[config.kind]
        """`write(body) -> (bytes, content type)`; `MappingError` when the body cannot be written so."""

    def _json(self, body: Any) -> tuple[bytes, str]:
        return _json.dumps(body), self._sent_type

    def _form(self, body: Any) -> tuple[bytes, str]:
        fields = _fields(body, "an application/x-www-form-urlencoded")
        pairs = _Pairs()
        for name, value in fields.items():
            if name in self._deep:
                pairs.deep(name, value)
            elif isinstance(value, dict):  # OpenAPI's `style: form` with `explode`: its properties as fields
                for key, item in value.items():
                    if key in fields:
                        raise MappingError(f"argument {name!r} has a property {key!r}, which a form would send "
                                           f"as the field {key!r} of its own", recoverable=True)  # fmt: skip
                    pairs.add(key, item)
            else:
                for item in _items(value):
                    pairs.add(name, item)
        return urlencode(pairs.written).encode(), self.content_type

    def _multipart(self, body: Any) -> tuple[bytes, str]:
        boundary = "crank-" + secrets.token_hex(16)
        parts: list[bytes] = []
        budget = _Budget()
        for name, value in _fields(body, "a multipart/form-data").items():
            is_file = name in self._files
            for item in [value] if not is_file and _structured(value) else _items(value):  # a part per item
                part = _file_part(name, item) if is_file else _field_part(name, item)
                budget.spend(len(part), file=is_file)
                parts.append(part)
        closing = f"--{boundary}--\r\n".encode()
        written = b"".join(f"--{boundary}\r\n".encode() + part for part in parts) + closing
        return written, f"multipart/form-data; boundary={boundary}"

    def _text(self, body: Any) -> tuple[bytes, str]:
        if not isinstance(body, str):
            raise MappingError(f"the body of a {self.content_type} call is a string, not {_kind(body)}",
                               recoverable=True, suggested_action="Pass the body as one string.")  # fmt: skip
        return body.encode(), self._sent_type

    def _binary(self, body: Any) -> tuple[bytes, str]:
        file = decode_file(body, where="body")  # bounded by its encoded length
        content_type = self.content_type
        if "*" in content_type:
            if file.media_type is None or not _matches(file.media_type, content_type):
                raise MappingError(
                    f"the body is a file of type {content_type}: pass it as a data: URL that names its type",
                    recoverable=True, suggested_action="Pass data:<type>;base64,<content>, its type matching "
                    f"{content_type}.",
                )  # fmt: skip
            content_type = file.media_type
        return file.content, content_type


def decode_file(value: Any, *, where: str) -> File:
    """A file given as standard base64 or a `data:` URL; `MappingError` naming `where` otherwise, or when it is
    larger than `MAX_UPLOAD_BYTES` (checked before it is decoded)."""
    if not isinstance(value, str):
        raise _not_a_file(where, f"not {_kind(value)}")
    if len(value) > MAX_UPLOAD_BYTES * 4 // 3 + 4096:  # the largest base64 or data: URL of a file within bounds
        raise _too_large()
    try:
        file = _data_url(value, where) if value[:5].lower() == "data:" else File(base64.b64decode(value, validate=True))
    except binascii.Error:
        raise _not_a_file(where, "neither base64 nor a data: URL") from None
    if len(file.content) > MAX_UPLOAD_BYTES:
        raise _too_large()
    return file


class _Budget:
    """The bytes a call's body has left: its files decoded, and its fields as written."""

    def __init__(self) -> None:
        self.left = MAX_UPLOAD_BYTES

    def spend(self, size: int, *, file: bool = False) -> None:
        self.left -= size
        if self.left < 0:
            raise _too_large() if file else _body_too_large()


class _Pairs:
    """A form's pairs, counted as they are made: a short key repeated over many values (or nested deep) cannot
    make a body larger than the budget."""

    def __init__(self) -> None:
        self.written: list[tuple[str, str]] = []
        self._budget = _Budget()

    def add(self, key: str, value: Any) -> None:
        if value is None:
            return
        text = _json.as_text(value)
        self._budget.spend(len(key) + len(text) + 2)
        self.written.append((key, text))

    def deep(self, key: str, value: Any) -> None:
        """OpenAPI's `deepObject`, to any depth: `key[name]=value`, an array's items `key[0]=value`. A name with a
        bracket is refused: a server would read it as another field."""
        if isinstance(value, dict):
            for name, item in value.items():
                if "[" in name or "]" in name:
                    raise MappingError(f"the key {name!r} under {key!r} may not hold '[' or ']': a form would send "
                                       "it as another field", recoverable=True)  # fmt: skip
                self.deep(f"{key}[{name}]", item)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                self.deep(f"{key}[{index}]", item)
        else:
            self.add(key, value)


def _data_url(value: str, where: str) -> File:
    """RFC 2397: `data:[<media type>][;name=<file name>][;base64],<data>`."""
    header, comma, data = value[5:].partition(",")
    if not comma:
        raise _not_a_file(where, "a data: URL without its ','")
    media_type, *parameters = header.split(";")
    encoded = bool(parameters) and parameters[-1].strip().lower() == "base64"
    name = next((unquote(p.split("=", 1)[1]) for p in parameters if p.strip().lower().startswith("name=")), None)
    try:
        content = base64.b64decode(unquote(data), validate=True) if encoded else unquote_to_bytes(data)
    except binascii.Error:
        raise _not_a_file(where, "a data: URL whose content is not base64") from None
    return File(content, _concrete(media_type.strip()), name or None)


def _fields(body: Any, kind: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise MappingError(f"{kind} body is an object of fields, not {_kind(body)}", recoverable=True,
                           suggested_action="Pass the body's fields as separate arguments.")  # fmt: skip
    return {name: value for name, value in body.items() if value is not None}


def _structured(value: Any) -> bool:
    """An object, or an array that holds objects or arrays: one JSON part, since parts cannot nest."""
    return isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict | list) for v in value))


def _kind(value: Any) -> str:
    """What a JSON value is, for a message: `an object`, `a number`."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _items(value: Any) -> list[Any]:
    return [item for item in value if item is not None] if isinstance(value, list) else [value]


def _file_part(name: str, value: Any) -> bytes:
    """A file field's part: its `data:` URL's type and name, else `application/octet-stream` and the field's name."""
    file = decode_file(value, where=f"argument for {name!r}")
    return _part(name, file.content, file.media_type or _OCTET_STREAM, file.name or name)


def _field_part(name: str, value: Any) -> bytes:
    """Any other field's part: an object, or an array holding some, as JSON; anything else as text."""
    if _structured(value):
        return _part(name, _json.dumps(value), "application/json")
    return _part(name, _json.as_text(value).encode())


def _part(name: str, content: bytes, content_type: str | None = None, filename: str | None = None) -> bytes:
    """One part of a multipart/form-data body, its names escaped as HTML's form submission does (RFC 7578, 4.2)."""
    disposition = f'form-data; name="{_quoted(name)}"'
    if filename is not None:
        disposition += f'; filename="{_quoted(filename)}"'
    head = f"Content-Disposition: {disposition}\r\n"
    if content_type is not None:
        head += f"Content-Type: {content_type}\r\n"
    return head.encode() + b"\r\n" + content + b"\r\n"


def _quoted(text: str) -> str:
    return text.replace("\r", "%0D").replace("\n", "%0A").replace('"', "%22")


def _concrete(media_type: str) -> str | None:
    """A `data:` URL's media type when it is one (`type/subtype`, no wildcard), else None: it becomes a header."""
    return media_type if media_type_problem(media_type) is None and "*" not in media_type else None


def _matches(media_type: str, pattern: str) -> bool:
    """`image/png` matches `image/*` and `*/*`; the parameters are not compared."""
    kind, _, sub = media_type.split(";", 1)[0].strip().lower().partition("/")
    want_kind, _, want_sub = pattern.split(";", 1)[0].strip().lower().partition("/")
    return bool(sub) and want_kind in ("*", kind) and want_sub in ("*", sub)


def _not_a_file(where: str, what: str) -> MappingError:
    return MappingError(f"{where} is a file: {what}", recoverable=True,
                        suggested_action=f"Pass the file's content as {_FILE_HINT}.")  # fmt: skip


def _utf8(content_type: str) -> str:
    """A text type as sent: the string is written as UTF-8, whatever charset the description named."""
    essence, *parameters = content_type.split(";")
    kept = [p.strip() for p in parameters if p.strip() and not p.strip().lower().startswith("charset=")]
    return "; ".join([essence.strip(), *kept, "charset=utf-8"])


def _body_too_large() -> MappingError:
    return MappingError(
        f"The arguments make an upstream body of more than {MAX_UPLOAD_BYTES} bytes, which is not sent.",
        error_code="arguments_too_large", recoverable=True,
        suggested_action="Pass fewer or shorter values for the body's fields.",
    )  # fmt: skip


def _too_large() -> MappingError:
    return MappingError(
        f"The files of one call may hold at most {MAX_UPLOAD_BYTES} bytes.", error_code="file_too_large",
        recoverable=True, suggested_action="Send a smaller file, or fewer files at once.",
    )  # fmt: skip
