"""``EnvironmentPolicy``: which variables a tool or MCP server inherits, name by name.

The end-to-end proof (a real agent running ``env``) is in
``tests/acp/test_tool_secrets.py``; these pin the rules themselves.
"""

from __future__ import annotations

import pytest

from toolprep.runtime.tools.environment import REDACTED, EnvironmentPolicy, is_secret_name

SECRET_NAMES = (
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "TOOLPREP_TOKEN",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "HF_TOKEN",
    "NPM_TOKEN",
    "NPM_CONFIG__AUTH",
    "NPM_CONFIG__AUTHTOKEN",
    "GITLAB_PAT",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "DATABASE_URL",
    "ANALYTICS_DATABASE_URL",
    "REDIS_URL",
    "SENTRY_DSN",
    "STRIPE_SECRET",
    "CLIENT_SECRET_VALUE",
    "DB_PASSWORD",
    "PGPASSWORD",
    "LDAP_PASSWD",
    "SMTP_PASS",
    "MYSQL_PWD",
    "AZURE_STORAGE_CONNECTION_STRING",
    "DOCKER_CREDENTIALS",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "SIGNING_KEY",
    "DD_APIKEY",
    "SLACK_WEBHOOK_URL",
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "OP_SESSION_MY",
    "BW_SESSION",
    "deploy_token",  # names are matched whatever their case
    "Db_Password",
)

HARMLESS_NAMES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TERM",
    "SHELL",
    "USER",
    "LOGNAME",
    "PWD",
    "OLDPWD",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "XDG_RUNTIME_DIR",
    "XDG_SESSION_ID",
    "KEYBOARD_LAYOUT",
    "TOKENIZERS_PARALLELISM",
    "EDITOR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "GIT_ASKPASS",
    "SSH_CONNECTION",
    "DISPLAY",
    "XAUTHORITY",
    "HTTPS_PROXY",
    "NODE_ENV",
)


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_names_that_hold_secrets_are_recognised(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", HARMLESS_NAMES)
def test_what_programs_need_to_run_is_not_taken_for_a_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_the_environment_keeps_what_programs_need_and_drops_the_rest() -> None:
    environ = {name: f"value-of-{name.lower()}" for name in SECRET_NAMES + HARMLESS_NAMES}
    policy = EnvironmentPolicy.for_agent(configured_key=None, environ=environ)
    assert policy.environment(environ).keys() == set(HARMLESS_NAMES)


def test_a_url_with_a_password_is_dropped_whatever_its_name() -> None:
    environ = {
        "HTTPS_PROXY": "http://proxyuser:s3cret-proxy-pass@proxy.example:3128",
        "UPSTREAM": "https://mirror.example/simple",
        "GIT_REMOTE": "git@github.com:owner/repo.git",
    }
    policy = EnvironmentPolicy.for_agent(configured_key=None, environ=environ)
    assert policy.environment(environ).keys() == {"UPSTREAM", "GIT_REMOTE"}


def test_a_password_in_a_url_or_the_base_url_is_masked_on_its_own() -> None:
    environ = {"HTTPS_PROXY": "http://proxyuser:s3cret-proxy-pass@proxy.example:3128"}
    policy = EnvironmentPolicy.for_agent(
        configured_key=None,
        base_url="https://user:base-url-pass-77@llm.example/v1",
        environ=environ,
    )
    shown = "curl -u proxyuser:s3cret-proxy-pass; password base-url-pass-77"
    assert policy.mask(shown) == f"curl -u proxyuser:{REDACTED}; password {REDACTED}"
    # The base URL's password is pinned: no variable holding it reaches a tool.
    assert policy.environment({"COPY": "base-url-pass-77", "N": "1"}) == {"N": "1"}


def test_values_of_dropped_variables_are_masked_and_their_copies_dropped() -> None:
    environ = {"GITHUB_TOKEN": "ghp_maskme0123456789", "COPY": "ghp_maskme0123456789", "N": "1"}
    policy = EnvironmentPolicy.for_agent(configured_key=None, environ=environ)
    assert policy.environment(environ) == {"N": "1"}
    assert policy.mask("token ghp_maskme0123456789 used") == f"token {REDACTED} used"


def test_a_passed_variable_comes_through_unmasked() -> None:
    environ = {"NPM_TOKEN": "npm_passed0123456789", "GH_TOKEN": "gh-kept-out-0123456"}
    policy = EnvironmentPolicy.for_agent(configured_key=None, passed={"NPM_TOKEN"}, environ=environ)
    assert policy.environment(environ) == {"NPM_TOKEN": "npm_passed0123456789"}
    assert policy.mask("npm_passed0123456789") == "npm_passed0123456789"
    assert policy.mask("gh-kept-out-0123456") == REDACTED


@pytest.mark.parametrize(
    "name", ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN", "TOOLPREP_TOKEN"]
)
def test_provider_credentials_and_the_serve_token_are_never_passed(name: str) -> None:
    environ = {name: "some-value-0123456789"}
    with pytest.raises(ValueError, match=rf"cannot pass {name} to tools \(--pass-env\)"):
        EnvironmentPolicy.for_agent(configured_key=None, passed={name}, environ=environ)


def test_a_copy_of_the_configured_key_or_the_token_is_never_passed() -> None:
    environ = {"KEY_COPY": "sk-configured-0123456789", "TOKEN_COPY": "serve-token-0123456789"}
    environ["TOOLPREP_TOKEN"] = environ["TOKEN_COPY"]
    for name in ("KEY_COPY", "TOKEN_COPY"):
        with pytest.raises(ValueError, match=rf"cannot pass {name} to tools"):
            EnvironmentPolicy.for_agent(
                configured_key="sk-configured-0123456789", passed={name}, environ=environ
            )


def test_a_name_both_scrubbed_and_passed_is_refused() -> None:
    with pytest.raises(ValueError, match="MY_VAR is named both by --scrub-env and by --pass-env"):
        EnvironmentPolicy.for_agent(
            configured_key=None, names={"MY_VAR"}, passed={"MY_VAR"}, environ={}
        )
