"""Method titles and descriptions per language from YAML files, as seed 001 lays them out.

    translations/rpc.uk.yaml          base translations, every group
    translations/rpc/mcp.uk.yaml      only for the `mcp` group (texts for an AI agent, say)

Each file maps a method name to `title` and/or `description`; the key is the method name, so a
translation applies to every version of the method.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from crank.exceptions import ConfigurationError
from crank.mcp.translations import Translations

__all__ = ["load_translations"]


def load_translations(folder: Path, group: str, default_language: str) -> Translations:
    """The group's layer first, then the base layer (seed 001's fallback chain)."""
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
        content: Any = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
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
