"""`--help` as a reader scans it: options grouped by purpose (each option's `rich_help_panel`),
the groups in one order for every command, and metavars that say what a value is (N, TEXT,
on|off) where click would print Python's types (`<int range>`, `<list[str]>`).

The help stays plain text (the app's `rich_markup_mode=None`): Typer draws its panels only
with rich's markup, which would read the help texts' `[default: ...]` as markup."""

from __future__ import annotations

import types
from enum import Enum
from pathlib import Path
from typing import Any, Union, get_args, get_origin

# typer vendors click: its own context and formatter are what a command is handed
from typer._click.core import Context
from typer._click.formatting import HelpFormatter
from typer.core import TyperArgument, TyperCommand, TyperOption

# The panels, in the order every command shows them; options in none come last.
MODEL_PANEL = "Model"
DRAFTING_PANEL = "Drafting"
SAMPLING_PANEL = "Sampling"
OUTPUT_PANEL = "Prompt and output"
PERFORMANCE_PANEL = "Performance"
SERVER_PANEL = "Server"
PANELS = (
    MODEL_PANEL,
    DRAFTING_PANEL,
    SAMPLING_PANEL,
    OUTPUT_PANEL,
    PERFORMANCE_PANEL,
    SERVER_PANEL,
)
OTHER_PANEL = "Other options"


def metavar(option: TyperOption) -> str | None:
    """What the value of an option without a metavar of its own is, in a word, from its
    annotation (N, TEXT, FILE, or an Enum's values); None for a flag."""
    if option.is_flag or option.count:
        return None
    kind = _bare(option.type_descriptor.annotation)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return "|".join(str(member.value) for member in kind)
    if kind in (int, float):
        return "N"
    if kind is Path:
        return "FILE"
    return "TEXT"


def _bare(annotation: Any) -> Any:
    """`int` of `int | None`, `list[int]`, `Optional[int]`."""
    while get_origin(annotation) in (Union, types.UnionType, list):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    return annotation


class GroupedHelp(TyperCommand):
    """A command whose --help lists its options by panel."""

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        arguments: list[tuple[str, str]] = []
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):  # its name, not Typer's `[NAME] <str>`
                if param.help:
                    arguments.append((param.metavar or param.name or "", param.help))
                continue
            if isinstance(param, TyperOption) and param.metavar is None:
                param.metavar = metavar(param)
            record = param.get_help_record(ctx)
            if record is not None:
                panel = getattr(param, "rich_help_panel", None) or OTHER_PANEL
                panels.setdefault(panel, []).append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        order = [*PANELS, *(p for p in panels if p not in PANELS and p != OTHER_PANEL), OTHER_PANEL]
        for panel in order:
            if panel in panels:
                with formatter.section(panel):
                    formatter.write_dl(panels[panel])
