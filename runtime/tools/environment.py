"""The environment a tool's subprocess gets: the agent's own, minus its secrets.

Whatever a command can read from its environment, the model can print with
``env`` and the output travels to the editor and back to the provider; an
MCP server can hand it on just as well. So no tool and no MCP server
inherits a secret: the provider's credentials, the serve token, anything
named like a secret (``SECRET_NAME_PATTERNS``), any URL carrying a password,
any variable holding the key the provider was actually configured with
(whatever its name), and any name the user lists (``--scrub-env``). The
same secrets are also masked in a command's output, for the ways a command
can find them without its environment (a ``.env`` file,
``/proc/<parent>/environ``).

The user may hand a variable through on purpose (``--pass-env``), except the
provider credentials and the serve token: those never reach a tool, and
asking for one is refused when the agent starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

__all__ = [
    "CREDENTIAL_NAMES",
    "PASS_ENV_VARIABLE",
    "REDACTED",
    "SCRUB_ENV_VARIABLE",
    "SECRET_NAME_PATTERNS",
    "SERVE_TOKEN_VARIABLE",
    "EnvironmentPolicy",
    "is_secret_name",
    "parse_variable_names",
    "url_password",
]

CREDENTIAL_NAMES = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"})
"""Provider credentials that are removed whatever the configuration says."""

SERVE_TOKEN_VARIABLE = "TOOLPREP_TOKEN"
"""Holds the token ``toolprep serve`` requires of its clients (``--token`` is put there too)."""

SCRUB_ENV_VARIABLE = "TOOLPREP_SCRUB_ENV"
"""Comma-separated names of further variables that tools must not inherit."""

PASS_ENV_VARIABLE = "TOOLPREP_PASS_ENV"
"""Comma-separated names of variables handed to tools although they look like secrets."""

_CONFIGURATION_VARIABLES = frozenset({SCRUB_ENV_VARIABLE, PASS_ENV_VARIABLE})
# Kept from tools (they would name what a command was not meant to see) but hold no
# secret: their values are variable names, which masking would blot out of every output.

NEVER_PASSED_NAMES = CREDENTIAL_NAMES | {SERVE_TOKEN_VARIABLE}
"""Names ``--pass-env`` refuses: the provider's credentials and the serve token."""

SECRET_NAME_PATTERNS: tuple[str, ...] = (
    # Named for what they hold, wherever the word stands.
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",  # *_CREDENTIALS, GOOGLE_APPLICATION_CREDENTIALS
    "*WEBHOOK*",  # a webhook URL is its own credential
    # Named for what they hold, as the last word.
    "*TOKEN",  # GITHUB_TOKEN, GH_TOKEN, HF_TOKEN, NPM_TOKEN, NPM_CONFIG__AUTHTOKEN, TOOLPREP_TOKEN
    "*_KEY",  # *_API_KEY, *_SECRET_KEY, *_PRIVATE_KEY, *_ACCESS_KEY
    "*APIKEY",
    "*_KEY_ID",
    "*_PAT",  # personal access tokens
    "*_PASS",  # SMTP_PASS, DB_PASS
    "*_PWD",  # MYSQL_PWD (PWD and OLDPWD have no underscore before it)
    "*_AUTH",  # NPM_CONFIG__AUTH
    "*_DSN",  # SENTRY_DSN
    "*_CONNECTION_STRING",
    "*_COOKIE",
    # Who the requests are billed to: organisation, project, tenant and subscription ids
    # (OPENAI_ORG_ID, OPENAI_ORGANIZATION, OPENAI_PROJECT_ID, AZURE_TENANT_ID). Not keys,
    # but they name the account a leaked key works against, and the SDKs send them.
    "*_ORG_ID",
    "*_ORGANIZATION",
    "*_ORGANIZATION_ID",
    "*_PROJECT_ID",
    "*_TENANT_ID",
    "*_SUBSCRIPTION_ID",
    # Sessions that grant access (AWS_SESSION_TOKEN, *_SESSION_KEY and *_SESSION_SECRET
    # are already caught by the rules above).
    "*_SESSION_TOKEN",
    # The collector's headers (OTEL_EXPORTER_OTLP_HEADERS and its per-signal forms) carry
    # its credentials: ``Authorization=Bearer ...``, ``api-key=...``.
    "OTEL_EXPORTER_OTLP_*HEADERS",
    # Whole families.
    "AWS_*",
    "OP_SESSION_*",  # 1Password CLI sessions
    # Single names: connection strings, agents and sessions that grant access.
    "DATABASE_URL",
    "*_DATABASE_URL",
    "REDIS_URL",
    "MONGODB_URI",
    "MONGO_URL",
    "AMQP_URL",
    "CELERY_BROKER_URL",
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "KRB5CCNAME",
    "BW_SESSION",
)
"""Which variable names hold secrets: shell-style patterns matched against the upper-cased
name, so ``github_token`` counts as well.

Chosen so the variables programs need to run keep coming through (``PATH``,
``HOME``, ``LANG``, ``TERM``, ``SHELL``, ``USER``, ``PWD``, ``XDG_*``,
``KEYBOARD*``, ``TOKENIZERS_PARALLELISM``), while a name that only hints at a
secret is taken for one: a tool missing a variable fails visibly and the
user can ``--pass-env`` it, whereas a leaked secret cannot be taken back.
"""

REDACTED = "[redacted]"

# Shorter values are too likely to occur by chance ("1", "true") to be masked in output.
_MIN_MASKED_CHARS = 8
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# scheme://user:password@host: a proxy or database URL with its credentials in it.
_URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")


def url_password(value: str | None) -> str | None:
    """The password in ``value`` if it is a URL that holds one (``scheme://user:pw@host``)."""
    if not value or _URL_WITH_PASSWORD.search(value) is None:
        return None
    try:
        return urlsplit(value.strip()).password or None
    except ValueError:  # not a URL after all (a bad port, brackets)
        return None


def is_secret_name(name: str) -> bool:
    """True for the provider credentials and any name ``SECRET_NAME_PATTERNS`` matches."""
    upper = name.upper()
    return name in NEVER_PASSED_NAMES or any(
        fnmatchcase(upper, pattern) for pattern in SECRET_NAME_PATTERNS
    )


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

    A variable is removed if its name is a secret's (``is_secret_name``) or
    in ``names``, if its value is one of ``secrets`` or a URL with a
    password, unless it is in ``passed``. A variable whose value is one of
    ``pinned`` (the configured provider key, the serve token) is removed
    whatever its name, ``passed`` or not. Secrets are kept out of ``repr``
    so logging a policy never logs a key.
    """

    names: frozenset[str] = frozenset()
    secrets: frozenset[str] = field(default=frozenset(), repr=False)
    passed: frozenset[str] = frozenset()
    pinned: frozenset[str] = field(default=frozenset(), repr=False)

    @classmethod
    def for_agent(
        cls,
        *,
        configured_key: str | None,
        base_url: str | None = None,
        names: Iterable[str] = (),
        passed: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> EnvironmentPolicy:
        """The policy for an agent holding ``configured_key`` (and a password in
        ``base_url``, the provider's), given its own environment.

        The values of the variables removed by name count as secrets too, so
        a copy of any of them under an innocent name is removed as well, and
        each is masked in output. Raises ``ValueError`` if ``passed`` names
        a provider credential, the serve token, a variable holding either,
        or a variable ``names`` removes.
        """
        environ = os.environ if environ is None else environ
        names, passed = frozenset(names), frozenset(passed)
        pinned = {value for name, value in environ.items() if name in NEVER_PASSED_NAMES and value}
        pinned.update(value for value in (configured_key, url_password(base_url)) if value)
        for name in sorted(passed):
            if name in NEVER_PASSED_NAMES or environ.get(name) in pinned:
                raise ValueError(
                    f"cannot pass {name} to tools (--pass-env): the provider's credentials "
                    "and the serve token never reach a tool or an MCP server"
                )
            if name in names:
                raise ValueError(f"{name} is named both by --scrub-env and by --pass-env")
        secrets = {
            value
            for name, value in environ.items()
            if value
            and name not in passed
            and name not in _CONFIGURATION_VARIABLES
            and (is_secret_name(name) or name in names)
        }
        # A password in a URL-valued variable (a proxy's, say) is masked on its own too.
        secrets.update(
            password
            for name, value in environ.items()
            if name not in passed and (password := url_password(value)) is not None
        )
        return cls(
            names=names,
            secrets=frozenset(secrets | pinned),
            passed=passed,
            pinned=frozenset(pinned),
        )

    def removes(self, name: str, value: str) -> bool:
        if value in self.pinned:
            return True
        if name in self.passed:
            return False
        return (
            is_secret_name(name)
            or name in self.names
            or value in self.secrets
            or _URL_WITH_PASSWORD.search(value) is not None
        )

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
