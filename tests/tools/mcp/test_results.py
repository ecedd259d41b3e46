"""CallToolResult -> ToolOutcome with real SDK result objects: every content kind, errors, the cut."""

from __future__ import annotations

import base64

import mcp_types as types

from tools.mcp.results import from_result

PNG = b"\x89PNG\r\n\x1a\nfake"


def outcome(*content, structured=None, is_error=False, vision=False, max_chars=50_000):
    result = types.CallToolResult(content=list(content), structured_content=structured, is_error=is_error)
    return from_result(result, server="s", tool="t", vision=vision, max_chars=max_chars)


def test_text_blocks_join_in_order():
    got = outcome(types.TextContent(type="text", text="one"), types.TextContent(type="text", text="two"))
    assert (got.text, got.outcome, got.is_error) == ("one\ntwo", "ok", False)


def test_structured_content_is_used_when_no_block_carries_it():
    assert outcome(structured={"total": 3}).text == '{"total": 3}'
    assert outcome().text == "(the tool returned nothing)"


def test_images_audio_and_resources():
    data = base64.b64encode(PNG).decode()
    got = outcome(
        types.ImageContent(type="image", data=data, mime_type="image/png"),
        types.AudioContent(type="audio", data=data, mime_type="audio/wav"),
        types.EmbeddedResource(
            type="resource", resource=types.TextResourceContents(uri="file:///a.txt", text="inside")
        ),
        types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(uri="file:///b.bin", blob=data)),
        types.ResourceLink(type="resource_link", uri="file:///c", name="c"),
        vision=True,
    )
    assert [(a.data, a.mime) for a in got.attachments] == [(PNG, "image/png"), (PNG, "audio/wav")]
    assert got.image_parts == [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]
    assert got.text.splitlines() == [
        f"[image 1: image/png, {len(PNG)} bytes, shown to you]",
        f"[audio 2: audio/wav, {len(PNG)} bytes, kept as an attachment]",
        "inside",
        "[resource file:///b.bin: binary, not readable as text]",
        "[resource link: file:///c (c)]",
    ]


def test_bad_base64_is_left_out_with_a_note():
    got = outcome(types.ImageContent(type="image", data="!!not base64!!", mime_type="image/png"), vision=True)
    assert got.attachments == [] and got.image_parts == [] and got.text == "[image: not valid base64, left out]"


def test_is_error_says_so_and_the_cut_keeps_the_note_visible():
    failed = outcome(types.TextContent(type="text", text="no such order"), is_error=True)
    assert failed.is_error and failed.outcome == "error"
    assert failed.text == "error: s.t reported a failure: no such order"
    cut = outcome(types.TextContent(type="text", text="y" * 120), max_chars=100)
    assert cut.text == "y" * 100 + "\n[... cut: 20 more characters; the tool's result was longer]"
