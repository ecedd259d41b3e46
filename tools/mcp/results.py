"""What an MCP tool call gives back, as the agent needs it: `ToolOutcome`.

A `CallToolResult` holds content blocks (text, image, audio, resource links, embedded resources)
and maybe structured content. The model gets text: each text block in order, an embedded text
resource's text, a one-line note for what it cannot read, and the structured content as JSON when
no block carries it. An image is kept as bytes + MIME type (`attachments`: the console shows them)
and, when the model can see, also given as an `image_url` part (`image_parts`; OpenAI's API takes
images in user messages, not in tool messages, so the caller places them). `is_error` results and
failures on the way (timeout, server down, connection lost) become an outcome whose text says so:
the turn goes on and the model can tell the person. Text past `max_result_chars` is cut with a note.

The blocks are read by their `type` field, so this module needs no SDK import: an `McpTools` with no
server configured never loads the SDK.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any

from agent.tools import OK, Attachment, ToolOutcome, cut_result

if TYPE_CHECKING:
    from mcp_types import CallToolResult

# Outcome kinds, also the `outcome` label of chinwag_tool_calls_total.
ERROR, TIMEOUT, UNAVAILABLE, INTERRUPTED, UNKNOWN_TOOL, BAD_ARGUMENTS, DENIED = (
    "error",
    "timeout",
    "unavailable",
    "interrupted",
    "unknown_tool",
    "bad_arguments",
    "denied",
)
__all__ = ["OK", "Attachment", "ToolOutcome"]


def failure(server: str, tool: str, outcome: str, text: str) -> ToolOutcome:
    return ToolOutcome(text=f"error: {text}", outcome=outcome, server=server, tool=tool)


def from_result(result: CallToolResult, *, server: str, tool: str, vision: bool, max_chars: int) -> ToolOutcome:
    """A `CallToolResult` as the model and the store take it."""
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    attachments: list[Attachment] = []
    blocks: list[Any] = list(result.content)  # read by their `type` field (see the docstring)
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            try:
                data = base64.b64decode(block.data, validate=True)
            except (binascii.Error, ValueError):
                texts.append(f"[{kind}: not valid base64, left out]")
                continue
            attachments.append(Attachment(data, block.mime_type))
            if kind == "image" and vision:
                images.append(
                    {"type": "image_url", "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"}}
                )
            seen = "shown to you" if kind == "image" and vision else "kept as an attachment"
            texts.append(f"[{kind} {len(attachments)}: {block.mime_type}, {len(data)} bytes, {seen}]")
        elif kind == "resource":
            resource = block.resource
            if getattr(resource, "text", None) is not None:
                texts.append(resource.text)
            else:
                texts.append(f"[resource {resource.uri}: {resource.mime_type or 'binary'}, not readable as text]")
        elif kind == "resource_link":
            texts.append(f"[resource link: {block.uri}" + (f" ({block.name})" if block.name else "") + "]")
        else:
            texts.append(f"[a {kind} block, not shown]")
    if result.structured_content is not None and not texts:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    body = "\n".join(texts) or "(the tool returned nothing)"
    if result.is_error:
        body = f"error: {server}.{tool} reported a failure: {body}"
    return ToolOutcome(
        text=cut_result(body, max_chars),
        outcome=ERROR if result.is_error else OK,
        server=server,
        tool=tool,
        image_parts=images,
        attachments=attachments,
    )
