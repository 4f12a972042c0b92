"""An ``{"error": ...}`` inside an OpenAI-compatible stream, as the ``StreamError`` it means.

Servers put errors in the stream in several shapes (a string, an object with
``code``, ``type`` or an HTTP status); the mapping decides whether the attempt
is worth repeating and names its kind, so the retry policy reads one answer
whatever the server sent.
"""

from __future__ import annotations

from typing import Any

from toolprep.runtime.providers.base import StreamError
from toolprep.runtime.providers.errors import preview, status_kind, status_retryable

__all__ = ["in_band_error"]

# In-band error ``type`` / ``code`` values worth a new attempt.
_RETRYABLE_ERRORS = {
    "server_error": "server",
    "internal_error": "server",
    "internal_server_error": "server",
    "api_error": "server",
    "service_unavailable": "server",
    "bad_gateway": "server",
    "timeout": "timeout",
    "rate_limit_exceeded": "rate_limit",
    "rate_limit_error": "rate_limit",
    "requests": "rate_limit",
    "tokens": "rate_limit",
    "overloaded": "overloaded",
    "overloaded_error": "overloaded",
    "engine_overloaded": "overloaded",
}
# Codes that say the model's own output was unusable: a new sample may well succeed.
# Checked before ``type``, which on these is the generic ``invalid_request_error``.
_MODEL_OUTPUT_ERRORS = {
    "tool_use_failed": "the provider could not read the model's tool call",
    "json_validate_failed": "the provider could not read the model's JSON output",
}
_FINAL_ERRORS = {
    "insufficient_quota": "billing",
    "invalid_request_error": "invalid_request",
    "invalid_api_key": "auth",
    "authentication_error": "auth",
    "permission_error": "permission",
    "context_length_exceeded": "request_too_large",
}


def in_band_error(error: Any) -> StreamError:
    """``{"error": ...}`` inside the stream, in the shapes OpenAI-compatible servers use."""
    if type(error) is not dict:
        return StreamError(str(error) or "provider error", retryable=False, kind="provider")
    message = error.get("message")
    message = message if type(message) is str and message else "provider error"
    code = error.get("code")
    if type(code) is str and code.lower() in _MODEL_OUTPUT_ERRORS:
        # Groq's ``tool_use_failed``: the model wrote a call the server could not parse.
        # Nothing was wrong with the request, so a retry samples the model again.
        what = _MODEL_OUTPUT_ERRORS[code.lower()]
        text = f"{what} ({code}): {message}"
        failed = error.get("failed_generation")
        if type(failed) is str and failed.strip():
            text += f" The model had written: {preview(failed)}"
        return StreamError(text, retryable=True, kind="malformed")
    labels = [v.lower() for v in (code, error.get("type")) if type(v) is str]
    for label in labels:
        if label in _FINAL_ERRORS:
            return StreamError(message, retryable=False, kind=_FINAL_ERRORS[label])
    for label in labels:
        if label in _RETRYABLE_ERRORS:
            return StreamError(message, retryable=True, kind=_RETRYABLE_ERRORS[label])
    for key in ("code", "status", "status_code"):
        status = error.get(key)
        if type(status) is int and 400 <= status < 600:
            return StreamError(
                message, retryable=status_retryable(status), kind=status_kind(status), status=status
            )
    return StreamError(message, retryable=False, kind="provider")
