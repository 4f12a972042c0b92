"""A session's settings over ACP: the model and the mode, shown and changed.

``session/new``, ``load`` and ``resume`` answer with ``modes`` and
``configOptions`` (``settings_of``); ``session/set_config_option`` changes the
model or the mode and ``session/set_mode`` the mode, each through the host, so
every client attached to the session hears the change.
"""

from __future__ import annotations

from typing import Any

from toolprep.messages.frames import MODEL_OPTION, session_options
from toolprep.messages.modes import MODE_OPTION, MODES, UnknownMode, check_mode, mode_state
from toolprep.runtime.acp.connection_sessions import ConnectionSessions
from toolprep.runtime.acp.errors import INVALID_PARAMS, RpcError, require
from toolprep.runtime.acp.session_errors import SESSION_NOT_FOUND, no_worker
from toolprep.runtime.kernel.session_host import (
    NoWorkerAvailable,
    SessionConfig,
    SessionHost,
    UnknownModel,
    UnknownSession,
)

__all__ = ["SessionSettings", "settings_of"]


def settings_of(config: SessionConfig) -> dict[str, Any]:
    """``modes`` and ``configOptions``, as session/new, load and resume answer."""
    return {
        "modes": mode_state(config.mode),
        "configOptions": session_options(config.model, config.models, config.mode),
    }


class SessionSettings:
    """The ``session/set_config_option`` and ``session/set_mode`` handlers."""

    def __init__(self, host: SessionHost, sessions: ConnectionSessions) -> None:
        self._host = host
        self._sessions = sessions

    def set_config_option(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        """Change a session setting: the model (``configId`` ``"model"``) or the mode
        (``"mode"``, as ``session/set_mode`` does)."""
        session_id = self._sessions.named(params)
        config_id = require(params, "configId", str)
        if config_id not in (MODEL_OPTION, MODE_OPTION):
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params: unknown config option {config_id!r}; "
                f"this agent offers {MODEL_OPTION!r} and {MODE_OPTION!r}",
            )
        if params.get("type", "value_id") != "value_id":
            raise RpcError(
                INVALID_PARAMS, f"Invalid params: the {config_id} option takes a value id"
            )
        value = require(params, "value", str)
        if config_id == MODE_OPTION:
            config = self._set_mode(session_id, value)
        else:
            try:
                config = self._host.set_model(session_id, value)
            except UnknownSession as exc:
                raise RpcError(SESSION_NOT_FOUND, str(exc)) from None
            except NoWorkerAvailable as exc:  # its worker waits to restart
                raise no_worker(exc) from None
            except UnknownModel as exc:
                raise RpcError(
                    INVALID_PARAMS, f"Invalid params: {exc}", {"models": list(exc.models)}
                ) from None
        return {"configOptions": settings_of(config)["configOptions"]}

    def set_mode(self, params: Any, request_id: Any = None) -> dict[str, Any]:
        """Change the session's mode; every client attached hears ``current_mode_update``."""
        session_id = self._sessions.named(params)
        self._set_mode(session_id, require(params, "modeId", str))
        return {}

    def _set_mode(self, session_id: str, value: str) -> SessionConfig:
        try:
            return self._host.set_mode(session_id, check_mode(value))
        except UnknownSession as exc:
            raise RpcError(SESSION_NOT_FOUND, str(exc)) from None
        except NoWorkerAvailable as exc:  # its worker waits to restart
            raise no_worker(exc) from None
        except UnknownMode as exc:
            raise RpcError(
                INVALID_PARAMS, f"Invalid params: {exc}", {"modes": list(MODES)}
            ) from None
