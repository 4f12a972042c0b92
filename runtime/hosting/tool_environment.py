"""Which environment variables tools are kept from, and which they are handed on purpose.

The user names them on the command line (``--scrub-env``, ``--pass-env``) and in the
environment (``TOOLPREP_SCRUB_ENV``, ``TOOLPREP_PASS_ENV``); the hosting reads both here,
once, and the kernel's ``EnvironmentPolicy`` applies the result to every tool and MCP server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from toolprep.runtime.tools.environment import (
    PASS_ENV_VARIABLE,
    SCRUB_ENV_VARIABLE,
    parse_variable_names,
)

__all__ = ["passed_variable_names", "scrubbed_variable_names"]


def scrubbed_variable_names(
    cli_names: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> frozenset[str]:
    """The variables the user asked to keep from tools: ``--scrub-env`` plus the env list.

    The lists themselves are included: they are the agent's configuration, and
    would tell a command the names it was not meant to see.
    """
    return _listed_names(cli_names, "--scrub-env", SCRUB_ENV_VARIABLE, env) | {
        SCRUB_ENV_VARIABLE,
        PASS_ENV_VARIABLE,
    }


def passed_variable_names(
    cli_names: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> frozenset[str]:
    """The variables the user hands to tools on purpose: ``--pass-env`` plus the env list."""
    return _listed_names(cli_names, "--pass-env", PASS_ENV_VARIABLE, env)


def _listed_names(
    cli_names: Sequence[str], option: str, variable: str, env: Mapping[str, str] | None
) -> frozenset[str]:
    env = os.environ if env is None else env
    listed = [item for item in env.get(variable, "").split(",") if item.strip()]
    return parse_variable_names(cli_names, source=option) | parse_variable_names(
        listed, source=variable
    )
