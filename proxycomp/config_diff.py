"""What the nested config dataclasses share: comparing two saved settings field by field."""
from __future__ import annotations

from typing import Any


def dotted(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as dotted keys ({"corpus": {"source": ...}} -> {"corpus.source": ...}), so a difference
    between two of them names the field."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changed_fields(saved: dict[str, Any], now: dict[str, Any], ignore: tuple[str, ...] = (),
                   defaults: dict[str, Any] | None = None) -> list[str]:
    """"field: old -> new" for every dotted field of `now` that differs from `saved` (JSON values compared). A field
    missing from `saved` (written before the field existed) counts as its value in `defaults`, if given."""
    before, after = dotted(saved), dotted(now)
    before = {**dotted(defaults or {}), **before}
    return [f"{k}: {before.get(k)!r} -> {v!r}" for k, v in after.items() if k not in ignore and before.get(k) != v]
