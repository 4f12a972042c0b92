"""Validation of everything toolprep sends against the official ACP v1 schema:
notifications and requests by their method, responses by the method of the
request they answer."""

from __future__ import annotations

import functools
import json
from typing import Any, Final

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.support.fixtures import ACP_SCHEMA_PATH


@functools.cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(ACP_SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


@functools.cache
def _validator(definition: str) -> jsonschema.protocols.Validator:
    schema = _schema()
    resource = Resource.from_contents(schema, default_specification=DRAFT202012)
    registry: Registry = Registry().with_resource("urn:acp", resource)
    ref_schema = {"$ref": f"urn:acp#/$defs/{definition}"}
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(ref_schema, registry=registry)


# Instances already found valid, by their exact ``repr``: suites validate the same frames again
# and again (a thousand sessions send the same cards), and the schema walk is what costs.
# Bounded: small instances only, and forgotten all at once when the set is full.
_VALID: set[str] = set()
_VALID_MAX = 20_000
_KEY_MAX_CHARS = 4096


def validate(definition: str, instance: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``instance`` is a valid ``definition``."""
    key = f"{definition}:{instance!r}"
    if key in _VALID:
        return
    _validator(definition).validate(instance)
    if len(key) > _KEY_MAX_CHARS:
        return
    if len(_VALID) >= _VALID_MAX:
        _VALID.clear()
    _VALID.add(key)


def validate_update(update: dict[str, Any], session_id: str = "sess") -> None:
    validate("SessionNotification", {"sessionId": session_id, "update": update})


def validate_agent_message(message: dict[str, Any]) -> None:
    """Any JSON-RPC message the agent writes: a notification, a request or a response."""
    method = message.get("method")
    if method == "session/update":
        validate("SessionNotification", message["params"])
    elif method == "session/request_permission":
        validate("RequestPermissionRequest", message["params"])
    elif method == "fs/read_text_file":
        validate("ReadTextFileRequest", message["params"])
    elif method == "fs/write_text_file":
        validate("WriteTextFileRequest", message["params"])
    elif method == "$/cancel_request":
        validate("CancelRequestNotification", message["params"])
    elif method is not None:
        raise AssertionError(f"agent sent unexpected method {method!r}")
    elif "error" in message:
        validate("Error", message["error"])
    else:
        assert "result" in message, message


RESPONSES: Final = {
    "initialize": "InitializeResponse",
    "authenticate": "AuthenticateResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/resume": "ResumeSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/delete": "DeleteSessionResponse",
    "session/close": "CloseSessionResponse",
    "session/prompt": "PromptResponse",
    "session/set_config_option": "SetSessionConfigOptionResponse",
    "session/set_mode": "SetSessionModeResponse",
}
"""The response type of each agent method the schema defines (``meta.json``'s ``agentMethods``)."""


def validate_response(method: str, message: dict[str, Any]) -> None:
    """The agent's answer to a request of ``method``: an ``Error``, or that method's response.

    A method the schema does not define (sent to test its refusal) can only be refused.
    """
    if "error" in message:
        validate("Error", message["error"])
        return
    assert "result" in message, message
    definition = RESPONSES.get(method)
    if definition is None:
        raise AssertionError(f"agent answered {method!r}, which ACP does not define: {message!r}")
    validate(definition, message["result"])
