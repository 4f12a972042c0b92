"""A model request's JSON body, serialised once, before the SDK sees it.

The SDKs' own ``create()`` walks the whole request (every message of a long
history) to transform it against their typed parameter schemas, copies it
per attempt and serialises it with the standard library's encoder. Our
parameter dicts are already in wire shape, so all of that is spent on a
no-op; orjson turns the same dict into the same JSON at a fraction of the
cost, and the bytes go through the SDK's public ``post(content=...)``,
which still adds auth, headers and base URL, retries and typed status
errors. Tests check that the body matches what ``create()`` sends.

orjson refuses integers beyond 64 bits, which a tool's JSON schema may
legitimately hold (``"maximum": 2**70``); such a body falls back to the
standard library encoder, as the SDK would have used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from toolprep.runtime.providers.base import StreamError

__all__ = ["encode_request_body"]


def encode_request_body(params: Mapping[str, Any] | list[Any]) -> bytes:
    """``params`` (a body, or a piece of one) as compact UTF-8 JSON; a final
    ``invalid_request`` error if it is not JSON."""
    try:
        return orjson.dumps(params)
    except orjson.JSONEncodeError:
        pass
    try:
        return json.dumps(
            params, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode()
    except (TypeError, ValueError) as exc:
        raise StreamError(
            f"the request cannot be sent: its body is not JSON ({exc})",
            retryable=False,
            kind="invalid_request",
        ) from exc
