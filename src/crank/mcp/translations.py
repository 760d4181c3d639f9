"""Tool titles and descriptions per language, `Accept-Language` negotiation, and YAML translation files.

Seed 001's per-field fallback chain, generalised: translation layers are searched in order
(for the in-process source: the API group's layer, then the base layer), each first in the
client's language and then in the default language; after that the tool's own text; for a
title, finally the tool name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml

from crank import _yaml
from crank.exceptions import ConfigurationError

__all__ = ["Layer", "Translations", "load_yaml_translations", "negotiate_language"]

Layer = Mapping[str, Mapping[str, Mapping[str, str]]]
"""language -> tool name -> field ("title" or "description") -> text."""

Field = Literal["title", "description"]


class Translations:
    """Ordered translation layers and the language to fall back to."""

    __slots__ = ("default_language", "languages", "_layers")

    def __init__(self, *layers: Layer, default_language: str = "en") -> None:
        self._layers = layers
        self.default_language = default_language
        found = {default_language}
        for layer in layers:
            found.update(layer)
        self.languages: tuple[str, ...] = tuple(sorted(found))

    def text(self, tool_name: str, field: Field, language: str) -> str | None:
        """The first text for `field` along the fallback chain, or None."""
        languages = (language,) if language == self.default_language else (language, self.default_language)
        for layer in self._layers:
            for lang in languages:
                value = layer.get(lang, {}).get(tool_name, {}).get(field)
                if value:
                    return value
        return None


def negotiate_language(accept_language: str | None, available: Sequence[str], default: str) -> str:
    """Pick the best of `available` for an `Accept-Language` header (RFC 9110 §12.5.4), else `default`."""
    if not accept_language:
        return default
    return _negotiate(accept_language, tuple(available), default)


@lru_cache(maxsize=1024)
def _negotiate(accept_language: str, available: tuple[str, ...], default: str) -> str:
    by_lower = {lang.lower(): lang for lang in available}
    for tag in _ranked_tags(accept_language):
        if tag == "*":
            return default
        if tag in by_lower:
            return by_lower[tag]
        primary = tag.split("-", 1)[0]
        if primary in by_lower:
            return by_lower[primary]
        for lower, lang in by_lower.items():
            if lower.split("-", 1)[0] == primary:
                return lang
    return default


def _ranked_tags(header: str) -> list[str]:
    ranked: list[tuple[float, int, str]] = []
    for index, item in enumerate(header.split(",")):
        tag, _, params = item.strip().partition(";")
        quality = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                quality = float(params[2:])
            except ValueError:
                quality = 0.0
        if tag and quality > 0:
            ranked.append((-quality, index, tag.strip().lower()))
    return [tag for _, _, tag in sorted(ranked)]


def load_yaml_translations(folder: Path, group: str, default_language: str = "en") -> Translations:
    """Seed 001's files: `folder/rpc.<lang>.yaml` (base) and `folder/rpc/<group>.<lang>.yaml` (the group's).

    Each maps a method (tool) name to `title` and/or `description`. The group's layer comes first.
    """
    group_layer = _layer(folder / "rpc", f"{group}.")
    base_layer = _layer(folder, "rpc.")
    return Translations(group_layer, base_layer, default_language=default_language)


def _layer(folder: Path, prefix: str) -> dict[str, dict[str, dict[str, str]]]:
    layer: dict[str, dict[str, dict[str, str]]] = {}
    if not folder.is_dir():
        return layer
    for path in sorted(folder.glob(f"{prefix}*.yaml")):
        language = path.name[len(prefix) : -len(".yaml")]
        if "." in language or not language:
            continue
        layer[language] = _read(path)
    return layer


def _read(path: Path) -> dict[str, dict[str, str]]:
    try:
        content: Any = _yaml.load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(content, dict):
        raise ConfigurationError(f"{path}: expected a mapping of method names to title/description")
    texts: dict[str, dict[str, str]] = {}
    for method, fields in content.items():
        if not isinstance(fields, dict) or not set(fields) <= {"title", "description"}:
            raise ConfigurationError(f"{path}: {method!r} must map to 'title' and/or 'description'")
        texts[str(method)] = {key: str(value) for key, value in fields.items()}
    return texts
