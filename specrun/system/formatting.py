"""Figures as people read them, the same in every front end."""

from __future__ import annotations


def format_or_dash(value: object, spec: str = "", unit: str = "") -> str:
    """`value` formatted with `spec` and followed by `unit`; "-" for a figure that does not exist
    (None)."""
    return "-" if value is None else f"{format(value, spec)}{unit}"


def format_size(size: int | None) -> str:
    if size is None:
        return "size unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"
