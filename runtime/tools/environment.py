"""The environment a tool's subprocess gets: the agent's own, minus its secrets.

Whatever a command can read from its environment, the model can print with
``env`` and the output travels to the editor and back to the provider. So
the provider's credentials never reach a tool: the well-known credential
variables, anything named ``*_API_KEY``, any variable holding the key the
provider was actually configured with (whatever its name), and any name the
user lists. The same secrets are also masked in a command's output, for
the ways a command can find them without its environment (a ``.env`` file,
``/proc/<parent>/environ``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "CREDENTIAL_NAMES",
    "REDACTED",
    "EnvironmentPolicy",
    "is_credential_name",
    "parse_variable_names",
]

CREDENTIAL_NAMES = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"})
"""Provider credentials that are removed whatever the configuration says."""

REDACTED = "[redacted]"

_CREDENTIAL_SUFFIX = "_API_KEY"
# Shorter values are too likely to occur by chance ("1", "true") to be masked in output.
_MIN_MASKED_CHARS = 8
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_credential_name(name: str) -> bool:
    """True for the provider credentials and anything named like an API key."""
    return name in CREDENTIAL_NAMES or name.upper().endswith(_CREDENTIAL_SUFFIX)


def parse_variable_names(names: Iterable[str], *, source: str) -> frozenset[str]:
    """Validate user-given variable names; ``source`` names the option in the error."""
    parsed: set[str] = set()
    for raw in names:
        name = raw.strip()
        if not _VARIABLE_NAME.match(name):
            raise ValueError(
                f"{source}: {name!r} is not an environment variable name "
                "(letters, digits and underscores, not starting with a digit)"
            )
        parsed.add(name)
    return frozenset(parsed)


@dataclass(frozen=True, slots=True)
class EnvironmentPolicy:
    """Which variables a tool's subprocess must not inherit, and which values to mask.

    ``names`` are removed in addition to the credential names; a variable
    whose value is one of ``secrets`` is removed whatever its name. Secrets
    are kept out of ``repr`` so logging a policy never logs a key.
    """

    names: frozenset[str] = frozenset()
    secrets: frozenset[str] = field(default=frozenset(), repr=False)

    @classmethod
    def for_agent(
        cls,
        *,
        configured_key: str | None,
        names: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> EnvironmentPolicy:
        """The policy for an agent holding ``configured_key``, given its own environment.

        The values of the credential variables count as secrets too, so a copy
        of any of them under an innocent name is removed as well.
        """
        environ = os.environ if environ is None else environ
        secrets = {value for name, value in environ.items() if is_credential_name(name) and value}
        if configured_key:
            secrets.add(configured_key)
        return cls(names=frozenset(names), secrets=frozenset(secrets))

    def removes(self, name: str, value: str) -> bool:
        return is_credential_name(name) or name in self.names or value in self.secrets

    def environment(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """``environ`` (default: this process's) without the variables this policy removes."""
        environ = os.environ if environ is None else environ
        return {name: value for name, value in environ.items() if not self.removes(name, value)}

    def mask(self, text: str) -> str:
        """``text`` with every secret long enough to be one replaced by a marker."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            if len(secret) >= _MIN_MASKED_CHARS and secret in text:
                text = text.replace(secret, REDACTED)
        return text
