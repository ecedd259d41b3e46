"""A conversation rendered as plain text for a model to read: the one renderer (and, for a person,
the one reading of a stored tool call: `tool_calls_for_person`).

Two readers use it: compression's summariser (agent.compress) and session_search's recaps
(tools.session_search). Both need the same walk — content that may be JSON, tool calls that may be
stored as a JSON string, a dict or a list, tool output cut at both ends (the start says what ran,
the end how it finished; the middle of a long log is rarely what matters) — and differ only in
layout, which a `Style` names: the summariser sees earlier summaries and call arguments, the recap
only the calls' names (it reads many sessions under one budget) and where each message starts, so
it can cut around the matches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

TOOL_EDGE_CHARS = 250  # characters kept from each end of a tool result


@dataclass(frozen=True)
class Style:
    label: str  # how a role label joins its text: "\n" (block) or ": " (inline)
    summary_label: str | None  # a stored system message (an earlier summary) gets this label; None: as its role
    tool_label: str  # "TOOL RESULT" / "TOOL", then the tool's name
    unnamed_tool: str  # the name shown when a result carries none
    call_arguments: int  # characters of each call's arguments, one line per call; 0: one line of names
    part_gap: str  # between the parts of one message (its text, its calls)
    cut: str  # the marker left where the middle was cut ({n}: characters cut)


SUMMARY = Style("\n", "EARLIER SUMMARY", "TOOL RESULT", "", 100, "\n\n", " [... {n} characters cut ...] ")
RECAP = Style(": ", None, "TOOL", "?", 0, "\n", "\n…[{n} characters cut]…\n")


@dataclass
class Rendered:
    text: str
    offsets: dict[int, int] = field(default_factory=dict)  # message id -> where its block starts in `text`


def cut_middle(text: str, edge: int, marker: str) -> str:
    if len(text) <= 2 * edge:
        return text
    return f"{text[:edge]}{marker.format(n=len(text) - 2 * edge)}{text[-edge:]}"


@dataclass(frozen=True)
class ToolCall:
    name: str | None  # None: the stored call names no tool
    arguments: Any  # as stored: OpenAI's shape carries a JSON string


def tool_calls_of(value: Any) -> list[ToolCall]:
    """A message's tool calls, whether stored as JSON text, one dict or a list. Text that is not
    JSON, or an entry that is not a dict, is one call naming no tool (a person still sees it)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [ToolCall(None, value)]
    calls = []
    for call in value if isinstance(value, list) else [value]:
        if not isinstance(call, dict):
            calls.append(ToolCall(None, call))
            continue
        function = call.get("function")
        fn: dict[str, Any] = function if isinstance(function, dict) else {}
        name = fn.get("name") or call.get("name")
        calls.append(ToolCall(str(name) if name else None, (fn or call).get("arguments", "")))
    return calls


def tool_calls_for_person(value: Any) -> list[dict[str, str]]:
    """Each tool call as {name, arguments} for a person (the console, `chinwag sessions show`):
    "?" for a call naming no tool, JSON arguments re-indented, anything else as it is."""
    shown = []
    for call in tool_calls_of(value):
        arguments = call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, indent=2)
        shown.append({"name": call.name or "?", "arguments": text})
    return shown


def render(messages: Iterable[dict[str, Any]], style: Style, edge: int = TOOL_EDGE_CHARS) -> Rendered:
    """One block per message, two newlines apart; empty messages leave no block."""
    blocks: list[str] = []
    offsets: dict[int, int] = {}
    position = 0
    sep = style.label
    for message in messages:
        role = str(message.get("role") or "unknown")
        content = message.get("content") or ""
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        parts: list[str] = []
        if role == "system" and style.summary_label:
            parts.append(f"[{style.summary_label}]{sep}{content}")
        elif role == "tool":
            name = message.get("tool_name") or message.get("name") or style.unnamed_tool
            parts.append(f"[{style.tool_label} {name}]{sep}{cut_middle(content, edge, style.cut)}")
        elif role == "assistant":
            calls = [call for call in tool_calls_of(message.get("tool_calls")) if call.name]
            if style.call_arguments:
                if content:
                    parts.append(f"[ASSISTANT]{sep}{content}")
                for call in calls:
                    arguments = cut_middle(str(call.arguments or ""), style.call_arguments, style.cut)
                    parts.append(f"[ASSISTANT CALLS {call.name}] {arguments}")
            else:
                if calls:
                    parts.append(f"[ASSISTANT called: {', '.join(str(c.name) for c in calls)}]")
                if content:
                    parts.append(f"[ASSISTANT]{sep}{content}")
        else:
            parts.append(f"[{role.upper()}]{sep}{content}")
        if not parts:
            continue
        block = style.part_gap.join(parts)
        if message.get("id") is not None:
            offsets[int(message["id"])] = position
        blocks.append(block)
        position += len(block) + 2
    return Rendered("\n\n".join(blocks), offsets)
