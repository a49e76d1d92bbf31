"""Images in requests: bytes from a ``data:`` URI, base64 or (when the operator allows it) a fetched URL, and a chat
message's content parts as the SDK takes them.

The gateway only reads the bytes; the model decodes and checks them (``runtime.images``, ``runtime.vision``: the
formats, the pixels and bytes per image, the images per request), so every route and client meets the same limits
and the same 400 naming the image.
"""

from __future__ import annotations

import base64
from typing import Any

from tritonhf.serve.errors import empty, refused
from tritonhf.serve.fetch import FetchRefused, fetch
from tritonhf.serve.limits import Limits
from tritonhf.tasks import IMAGE_CHAT

CHAT_TASKS = ("text-generation", IMAGE_CHAT)  # chat without images: a text model or an image chat model


def chat_models(route: str, images: int) -> tuple[tuple[str, ...], str]:
    """(tasks, route as a refusal names it) of the models a chat may name: with images, an image chat model only."""
    if images:
        return (IMAGE_CHAT,), f"{route} with images"
    return CHAT_TASKS, route


async def chat_content(content: Any, where: str, limits: Limits) -> tuple[Any, int]:
    """A message's content as the SDK takes it, and its images: a string as it is; a list of parts, text
    (``text``, ``input_text``, ``output_text``) and images (chat's ``image_url``, Responses' ``input_image``), as
    ``{"type": "text"}`` and ``{"type": "image", "image": bytes}`` parts when it has images, else its text joined."""
    if not isinstance(content, list):
        return content, 0
    parts: list[dict[str, Any]] = []
    for number, part in enumerate(content):
        place = f"{where}[{number}]"
        found = part if isinstance(part, dict) else part.model_dump(exclude_none=True)
        kind = found.get("type")
        if kind in ("text", "input_text", "output_text"):
            text = found.get("text")
            if not isinstance(text, str):
                raise refused(f"{place}.text", "must be a string.")
            parts.append({"type": "text", "text": text})
        elif kind in ("image_url", "input_image"):
            url, field = _image_url(found, place)
            parts.append({"type": "image", "image": await image_bytes(url, field, limits)})
        else:
            raise refused(place, f"is a {kind!r} part; a message takes text and image parts (image_url, input_image).")
    images = sum(part["type"] == "image" for part in parts)
    if not images:
        return "".join(part["text"] for part in parts), 0
    return parts, images


def _image_url(part: dict[str, Any], place: str) -> tuple[str, str]:
    """The URL of an image part and the field that holds it: chat's ``{"image_url": {"url", "detail"}}`` (or the
    URL as a string), Responses' ``{"image_url": str, "detail"}``."""
    value = part.get("image_url")
    field = f"{place}.image_url"
    if isinstance(value, dict):
        value, field = value.get("url"), f"{field}.url"
    if part.get("file_id") is not None and value is None:
        raise refused(f"{place}.file_id", "names an uploaded file; this server has no files: send image_url.")
    if not isinstance(value, str) or not value:
        raise refused(field, "must be an image's data: URL (data:image/png;base64,...).")
    return value, field


async def image_bytes(item: str, where: str, limits: Limits) -> bytes:
    """An image given as a ``data:image/...;base64,`` URI or plain base64 (as Infinity takes them), or (only
    with ``--allow-image-urls``) an http(s) URL to a public address, fetched under ``serve/fetch.py``'s rules:
    a gateway that fetched any URL would let any caller make it reach hosts only it can see."""
    if item.startswith(("http://", "https://")):
        if not limits.allow_image_urls:
            raise refused(where, "is a URL; this server does not fetch URLs (started without --allow-image-urls). "
                          "Send the image as a data: URI or base64.")  # fmt: skip
        try:
            data = await fetch(item, limits.payload_limit)
        except FetchRefused as exc:
            raise refused(where, f"(a URL) {exc}") from exc
        if not data:
            raise empty(where)
        return data
    payload = item.split(",", 1)[1] if item.startswith("data:") and "," in item else item
    if item.startswith("data:") and ";base64," not in item[:100]:
        raise refused(where, "is a data: URI without ';base64,'; send the image's bytes base64-encoded.")
    try:
        data = base64.b64decode(payload, validate=True)
    except ValueError as exc:
        raise refused(where, f"is not base64 ({exc}); send a data:image/...;base64,... URI or base64.") from exc
    if not data:
        raise empty(where)
    return data
