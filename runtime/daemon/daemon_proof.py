"""Mutual proof of the token on one connection: the daemon proves it first, the token never travels.

``toolprep connect`` reads the daemon's address from ``serve.json``, and the
port it names may no longer be the daemon's: the daemon died, and another
local user listens there now. A bridge that sent ``Authorization: Bearer
TOKEN`` gave that user the token; one that then passed the editor's
messages let it answer ``initialize`` and send the editor ``fs/*`` and
``terminal/*`` requests, which the editor serves. So the bridge makes the
daemon prove it holds the token before anything leaves, and proves it holds
it in turn without sending it, all on the same TCP connection (a proof on
one connection and the token on a second would let a squatter in between,
if the daemon died in that window):

1. The bridge's upgrade request carries ``Toolprep-Challenge: NB`` (a fresh
   random nonce) and no ``Authorization``.
2. The daemon answers 101 with ``Toolprep-Challenge: ND`` (its own fresh
   nonce), ``Toolprep-Daemon-Url: URL`` (the address it listens on) and
   ``Toolprep-Proof: HMAC-SHA256(token, "toolprep daemon proof v1", URL, NB,
   ND)``.
3. The bridge checks that proof in constant time, and that ``URL`` is the
   one it dialed when the address came from ``serve.json``. Only then does
   it send its first WebSocket message, ``HMAC-SHA256(token, "toolprep
   bridge proof v1", URL, NB, ND)`` in hex, and after it the editor's
   messages. A squatter cannot make the daemon's proof, so it gets nothing.
4. The daemon reads that message before any other; a wrong or missing one
   (within ``PROOF_TIMEOUT_S``) closes the connection with 1008, and nothing
   before it reaches a session.

The two proofs carry different labels, so neither can be replayed as the
other, and the daemon's answers to any challenge a stranger sends (it gets
a 101 and a proof) are no oracle for the bridge's proof. The URL inside the
proofs binds them to the daemon's own port: a squatter on a stale port that
relays to a live daemon sharing the token (two data directories with one
``TOOLPREP_TOKEN``) gets a proof naming the other port, which the bridge
refuses. With ``--url`` the daemon's URL is not compared (a forwarded port
reaches it under another one).

``Authorization: Bearer TOKEN`` still opens a connection at once for other
WebSocket clients; a request carrying both is refused (400).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CHALLENGE_HEADER",
    "DAEMON_URL_HEADER",
    "PROOF_HEADER",
    "PROOF_TIMEOUT_S",
    "BridgeChallenge",
    "DaemonChallenge",
    "is_nonce",
    "new_nonce",
]

CHALLENGE_HEADER: Final = "Toolprep-Challenge"
PROOF_HEADER: Final = "Toolprep-Proof"
DAEMON_URL_HEADER: Final = "Toolprep-Daemon-Url"
PROOF_TIMEOUT_S: Final = 30.0
"""How long the daemon waits for a challenging client's proof before closing (1008)."""

_DAEMON_LABEL: Final = b"toolprep daemon proof v1"
_BRIDGE_LABEL: Final = b"toolprep bridge proof v1"
_NONCE: Final = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 random bytes, base64url, no padding


def new_nonce() -> str:
    """32 fresh random bytes in base64url: one challenge, used once."""
    return secrets.token_urlsafe(32)


def is_nonce(value: str) -> bool:
    """Whether ``value`` has the form ``new_nonce`` gives (anything else is refused: 400)."""
    return _NONCE.fullmatch(value) is not None


def _proof(label: bytes, token: str, url: str, bridge_nonce: str, daemon_nonce: str) -> str:
    """HMAC-SHA256 keyed with the token over the label and the fields, each length-prefixed
    so that no two different field lists give the same input."""
    message = bytearray(label)
    for field in (url, bridge_nonce, daemon_nonce):
        encoded = field.encode()
        message += len(encoded).to_bytes(4, "big") + encoded
    return hmac.new(token.encode(), bytes(message), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class DaemonChallenge:
    """The daemon's side of one challenged connection: what it answers, what it expects."""

    token: str
    url: str
    bridge_nonce: str
    daemon_nonce: str

    @classmethod
    def answering(cls, token: str, url: str, bridge_nonce: str) -> DaemonChallenge:
        return cls(token, url, bridge_nonce, new_nonce())

    def response_headers(self) -> dict[str, str]:
        """The headers of the 101: the daemon's nonce, its URL, and its proof."""
        proof = _proof(_DAEMON_LABEL, self.token, self.url, self.bridge_nonce, self.daemon_nonce)
        return {
            CHALLENGE_HEADER: self.daemon_nonce,
            DAEMON_URL_HEADER: self.url,
            PROOF_HEADER: proof,
        }

    def bridge_proved(self, message: bytes | str) -> bool:
        """Whether the first message is the bridge's proof (compared in constant time)."""
        given = message.encode() if isinstance(message, str) else message
        expected = _proof(_BRIDGE_LABEL, self.token, self.url, self.bridge_nonce, self.daemon_nonce)
        return hmac.compare_digest(given, expected.encode())


@dataclass(frozen=True, slots=True)
class BridgeChallenge:
    """The bridge's side: the nonce it sends, then the check of the daemon's answer."""

    token: str
    nonce: str

    @classmethod
    def fresh(cls, token: str) -> BridgeChallenge:
        return cls(token, new_nonce())

    def request_headers(self) -> dict[str, str]:
        return {CHALLENGE_HEADER: self.nonce}

    def answer(self, headers: Mapping[str, str], dialed_url: str | None) -> str:
        """The bridge's proof to send first, if ``headers`` (the 101's) prove the token;
        else ``ValueError`` saying what was wrong.

        ``dialed_url``, when given, must be the URL the daemon says it listens on.
        """
        daemon_nonce = headers.get(CHALLENGE_HEADER, "")
        url = headers.get(DAEMON_URL_HEADER, "")
        proof = headers.get(PROOF_HEADER, "")
        if not proof or not url or not is_nonce(daemon_nonce):
            raise ValueError("it answered the upgrade without a proof of the token")
        expected = _proof(_DAEMON_LABEL, self.token, url, self.nonce, daemon_nonce)
        if not hmac.compare_digest(proof.encode(), expected.encode()):
            raise ValueError("its proof of the token is wrong")
        if dialed_url is not None and url != dialed_url:
            raise ValueError(f"it proved the token for another address ({url})")
        return _proof(_BRIDGE_LABEL, self.token, url, self.nonce, daemon_nonce)
