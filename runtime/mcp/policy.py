"""Which MCP servers a session's client may have the agent start or reach.

An editor that launches ``toolprep acp`` speaks for the user: the servers it
names are the user's own configuration, so every entry is allowed
(``McpPolicy.trusted()``). A client of ``toolprep serve`` is whoever reached
its socket: a stdio entry would run any program as the user, and an ``http``
or ``sse`` URL would make the daemon fetch loopback or internal addresses on
the client's behalf. So the daemon refuses both unless it was started with

- ``--allow-mcp-command PROGRAM`` (repeatable): stdio entries whose
  ``command`` is exactly ``PROGRAM``. Exactly, not by basename: a basename
  match would let a client run any file it can name with that basename
  (``/tmp/upload/npx``). The arguments and ``env`` the client gives are not
  judged: allowing a program trusts it with whatever a client passes it;
- ``--allow-client-mcp``: stdio entries with any command;
- ``--allow-mcp-network``: ``http``/``sse`` URLs on any address. Without
  it a URL must be ``http(s)`` and every address its host resolves to must
  be public: not loopback, private, link-local, multicast, unspecified,
  reserved or otherwise not global (IPv4 inside IPv6, as in
  ``::ffff:127.0.0.1``, NAT64, 6to4 and Teredo, is judged by the IPv4 it
  carries).

``check`` raises ``McpRefused`` before anything is started; without
``--allow-mcp-network`` the HTTP client judges every request's addresses
again (``runtime.mcp.guarded_http``), so a host name resolving elsewhere
after the check gains nothing. The policy is
plain frozen data with an options form (``to_options`` / ``from_options``),
so it crosses to worker processes with the other runtime options and each
process that starts servers checks again.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never
from urllib.parse import urlsplit

from toolprep.runtime.mcp.specs import HttpServer, McpServerSpec, StdioServer

__all__ = ["McpPolicy", "McpRefused", "Resolver", "address_refusal"]

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

Resolver = Callable[[str, int], Sequence[str]]
"""``(host, port)`` to the addresses it resolves to; ``OSError`` if it does not."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


class McpRefused(ValueError):
    """A client named an MCP server this agent was not started to allow; says which flag would."""


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True, slots=True)
class McpPolicy:
    """What a client may name; the default allows nothing (``toolprep serve`` without flags)."""

    any_command: bool = False
    commands: frozenset[str] = frozenset()
    any_address: bool = False

    @classmethod
    def trusted(cls) -> McpPolicy:
        """Everything: the client is the user's own editor (``toolprep acp``)."""
        return cls(any_command=True, any_address=True)

    # --- the options form, which crosses to worker processes ------------------------------

    def to_options(self) -> dict[str, Any]:
        return {
            "any_command": self.any_command,
            "commands": sorted(self.commands),
            "any_address": self.any_address,
        }

    @classmethod
    def from_options(cls, raw: Mapping[str, Any] | None) -> McpPolicy:
        """The policy in ``raw`` (what ``to_options`` wrote); None allows nothing."""
        if raw is None:
            return cls()
        commands = raw.get("commands", [])
        any_command, any_address = raw.get("any_command"), raw.get("any_address")
        if not isinstance(any_command, bool) or not isinstance(any_address, bool):
            raise ValueError(f"not an MCP policy: {raw!r}")
        if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
            raise ValueError(f"an MCP policy's commands must be strings, not {commands!r}")
        return cls(any_command=any_command, commands=frozenset(commands), any_address=any_address)

    # --- checking -------------------------------------------------------------------------

    def check(self, specs: Iterable[McpServerSpec], resolve: Resolver = _resolve) -> None:
        """Raise ``McpRefused`` for the first of ``specs`` this policy does not allow.

        Resolves the host of every ``http``/``sse`` entry unless any address is allowed.
        """
        for spec in specs:
            match spec:
                case StdioServer():
                    self._check_command(spec)
                case HttpServer():
                    self._check_url(spec, resolve)
                case _:
                    assert_never(spec)

    def _check_command(self, spec: StdioServer) -> None:
        if self.any_command or spec.command in self.commands:
            return
        raise McpRefused(
            f"MCP server {spec.name!r}: this agent does not run commands a client names "
            f"({spec.command!r}); start it with --allow-mcp-command {spec.command} to allow "
            "this program, or --allow-client-mcp to allow any"
        )

    def _check_url(self, spec: HttpServer, resolve: Resolver) -> None:
        if self.any_address:
            return
        where = f"MCP server {spec.name!r}: URL {spec.url!r}"
        flag = "start the agent with --allow-mcp-network to allow it"
        parts = urlsplit(spec.url)
        scheme = parts.scheme.lower()
        try:
            host, port = parts.hostname, parts.port
        except ValueError as exc:  # a port that is not a number
            raise McpRefused(f"{where} is not a usable URL: {exc}") from None
        if scheme not in _DEFAULT_PORTS or not host:
            raise McpRefused(f"{where}: only http(s) URLs with a host are allowed; {flag}")
        addresses: Sequence[str]
        literal = _literal(host)
        if literal is not None:
            addresses = [literal]
        else:
            try:
                resolved = resolve(host, port or _DEFAULT_PORTS[scheme])
            except (OSError, UnicodeError) as exc:
                raise McpRefused(f"{where}: cannot resolve {host!r}: {exc}") from None
            if not resolved:
                raise McpRefused(f"{where}: {host!r} resolves to no address")
            addresses = resolved
        for address in addresses:
            refusal = address_refusal(address)
            if refusal is not None:
                raise McpRefused(f"{where} reaches {address}, {refusal}; {flag}")


def _literal(host: str) -> str | None:
    """``host`` when it is an IP address as ``ipaddress`` reads one (a zone id allowed)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return host


def address_refusal(text: str) -> str | None:
    """Why a connection to ``text`` is refused (``"a loopback address"``), or None if public.

    An address that does not parse is refused too: the resolver gave something unexpected.
    """
    try:
        address: IpAddress = ipaddress.ip_address(text)
    except ValueError:
        return "not an IP address"
    for candidate in _with_embedded(address):
        why = _class_of(candidate)
        if why is not None:
            return why
    return None


def _with_embedded(address: IpAddress) -> list[IpAddress]:
    """Any IPv4 address an IPv6 one carries (mapped, NAT64, 6to4, Teredo), then ``address``:
    the carried one names the class best (``::ffff:127.0.0.1`` is a loopback address)."""
    found: list[IpAddress] = []
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address.teredo is not None:
            found.extend(address.teredo)
        if address in _NAT64:
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    found.append(address)
    return found


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _class_of(address: IpAddress) -> str | None:
    if address.is_loopback:
        return "a loopback address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private:
        return "a private address"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "a site-local address"
    if not address.is_global:
        return "an address that is not global"
    return None
