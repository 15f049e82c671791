"""The table of tool-call syntaxes, and which one a chat template teaches: the first whose
marks the template writes, in an order where a more particular syntax comes before the one it
looks like (GLM's and Qwen3-Coder's tagged arguments before Hermes' `<tool_call>`, R1's fenced
JSON before V3.1's bare). llama.cpp's `common/chat.cpp` detects them from the same marks."""

from __future__ import annotations

from specrun.tools.harmony import Harmony
from specrun.tools.json_calls import Generic, Hermes, Llama3, Mistral
from specrun.tools.markers import DeepSeekR1, DeepSeekV31, KimiK2
from specrun.tools.syntax import Syntax, ToolFormat
from specrun.tools.tagged import Glm, Qwen3Coder

DETECTED: tuple[Syntax, ...] = (
    Harmony(),
    KimiK2(),
    DeepSeekR1(),
    DeepSeekV31(),
    Mistral(),
    Glm(),
    Qwen3Coder(),
    Hermes(),
    Llama3(),
)
FORMATS: dict[ToolFormat, Syntax] = {s.name: s for s in (*DETECTED, Generic())}


def tool_format(template: str | None) -> ToolFormat:
    """The tool-call syntax a chat template teaches, from what it writes: Hermes' where it
    reads `tools` but shows no syntax, the generic one where it knows no tools at all."""
    if not template:
        return "generic"
    found = next((s.name for s in DETECTED if s.detects(template)), None)
    return found or ("hermes" if "tools" in template else "generic")


def describes_tools(template: str | None) -> bool:
    """Whether a template writes the `tools` it is given (DeepSeek's do not: they are told
    of them in a system message, in their own syntax)."""
    return template is not None and "tools" in template


def renders_calls(template: str | None) -> bool:
    """Whether a template writes an assistant's `tool_calls` and the tool turns after them."""
    return template is not None and "tool_calls" in template
