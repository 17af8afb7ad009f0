"""What makes a relayed heartbeat a host's own word, and its answer the controller's.

A heartbeat relay (xce/worker/agent/relay.py) carries other hosts' heartbeats; it must be
able to delay or drop them and nothing else. So no token crosses it: when a worker registers
(straight to the controller, through every check a worker's request passes: token, bound
host, allow-list, client certificate), the controller hands it a random relay key for this
registration. Each relayed heartbeat is the host's JSON text with a sequence number and an
HMAC-SHA256 under that key; the controller takes it only if the MAC verifies and the number
is above the last one it took (a recorded heartbeat cannot be played again), and proves its
answer with an HMAC over the host, the number and the answer. A worker counts a relayed
answer as contact with the controller (which restarts its keepers' fence) only when that
proof verifies, so a relay that answers for the controller is a relay that failed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import msgspec

from xce.protocol.worker import RelayHeartbeat

KEY_BYTES = 32


def new_relay_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def heartbeat_mac(key: bytes, host: str, seq: int, heartbeat: str) -> str:
    """The MAC a host puts on heartbeat number `seq` (its JSON text, exactly as sent)."""
    message = f"xce-relayed-heartbeat\n{host}\n{seq}\n{heartbeat}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def answer_proof(key: bytes, host: str, seq: int, answer: dict[str, Any]) -> str:
    """The controller's proof that it took heartbeat `seq` of `host` and answered `answer`
    (encoded with sorted keys, so both sides hash the same bytes)."""
    body = msgspec.json.encode(answer, order="sorted").decode()
    message = f"xce-heard\n{host}\n{seq}\n{body}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def same(a: str, b: str) -> bool:
    """Compare MACs in constant time."""
    return hmac.compare_digest(a.encode(), b.encode())


class RelaySigner:
    """A worker's side: the relay key of its latest registration and the number of its
    last relayed heartbeat (the real worker's, xce/worker/agent/link.py, and the load
    bench's simulated ones)."""

    def __init__(self) -> None:
        self.key: bytes | None = None  # None: heartbeats go straight to the controller
        self.seq = 0

    def take(self, answer: Any) -> None:
        """The key a registration answer holds (a controller without relays sends none)."""
        raw = answer.get("relay_key") if isinstance(answer, dict) else None
        try:
            key = bytes.fromhex(raw) if isinstance(raw, str) else None
        except ValueError:
            key = None
        self.key = key or None
        self.seq = 0

    def sign(self, host: str, heartbeat: str) -> RelayHeartbeat:
        """The next heartbeat of `host` (its JSON text) as its relay takes it."""
        assert self.key is not None, "no relay key: heartbeats go direct"
        self.seq += 1
        mac = heartbeat_mac(self.key, host, self.seq, heartbeat)
        return RelayHeartbeat(seq=self.seq, heartbeat=heartbeat, mac=mac)


def proven(entry: Any, key: bytes, host: str, seq: int) -> tuple[dict[str, Any] | None, str]:
    """The controller's answer in a relay's entry when its proof verifies under this
    registration's key; else None and why."""
    if not isinstance(entry, dict):
        return None, "the relay's answer is not an entry"
    answer, proof = entry.get("answer"), entry.get("proof")
    if entry.get("status") != 200 or not isinstance(answer, dict):
        error = entry.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return None, f"the controller refused it ({message or entry.get('status')})"
    if not isinstance(proof, str) or not same(proof, answer_proof(key, host, seq, answer)):
        return None, "its answer does not carry the controller's proof"
    return answer, ""
