"""The task service's wire format, shared by the worker and `xce launch`.

Standard library only: `xce launch` runs inside jobs and must start fast. A connection
carries one task, and everything on it is a frame: `channel:u8 | length:u32` (network order)
and `length` bytes.

Both ends hold the attempt's launch credential and each proves it to the other, over both
ends' nonces, before anything of the task crosses; the credential itself never does:

1. server -> client CHALLENGE: `{"v": 3, "nonce": hex}`, a fresh random nonce per connection;
2. client -> server HELLO (at most MAX_HELLO bytes): `{"v", "job_id", "attempt", "host",
   "nonce", "proof"}`: the client's own fresh nonce and `proof(CLIENT_PROOF, ...)`, an
   HMAC-SHA256 keyed with the credential over both nonces and what the client asks for;
3. server -> client READY `{"proof"}` (`proof(SERVER_PROOF, ...)`) once the hello's proof
   is the attempt's, else one plain EXIT frame. The client sends nothing more to a server
   whose proof is not the credential's: one that only relays a real service's challenge
   cannot make it (the proof names both nonces, and the client's is new);
4. from here on every frame, in both directions, is sealed with the session key
   (`session_key`: the credential over both nonces and the attempt and host) and a
   sequence number of its direction (`Session`): the client's REQUEST (at most MAX_REQUEST
   bytes, `{"argv", "env", "task_id", "local_task_id"}`) and STDIN data (an empty one is end
   of input), the server's STDOUT, STDERR and one EXIT last (`{"exit_code": int|null,
   "signal": int|null, "error": str}`). A relay between the two, even one that saw the
   handshake, can neither put a frame of its own in (no key), nor replay, reorder or drop
   one unnoticed (the sequence), nor pass one direction's frame off as the other's.

What is sealed is authenticated, not hidden: argv, environment and output cross in clear.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import struct
from typing import Any

STDIN, STDOUT, STDERR, EXIT = 0, 1, 2, 3
CHALLENGE, HELLO, READY, REQUEST = 4, 5, 6, 7
HEADER = struct.Struct("!BI")
SEQUENCE = struct.Struct("!Q")
MAX_FRAME = 1 << 20
MAX_REQUEST = 512 * 1024
# A hello is a job id, an attempt, a host name, a nonce and a proof: a few hundred bytes.
MAX_HELLO = 2048
MAX_CHALLENGE = 256
# What may answer a hello: READY's proof or the refusal's few words (never sealed).
MAX_ANSWER = 4096
NONCE_BYTES = 32
TAG_BYTES = 32
VERSION = 3
# What each HMAC of the credential is for, so one made for anything else never passes as it.
CLIENT_PROOF = b"xce task service hello v3\0"
SERVER_PROOF = b"xce task service ready v3\0"
SESSION = b"xce-task-session"
# The direction a sealed frame goes, inside its tag: a frame never passes for the other way.
TO_SERVER, TO_CLIENT = b"c>s", b"s>c"


class NotProven(ValueError):
    """The other end did not prove the attempt's credential (or sealed a frame wrongly)."""


def frame(channel: int, data: bytes) -> bytes:
    return HEADER.pack(channel, len(data)) + data


def exit_body(exit_code: int | None, sig: int | None = None, error: str = "") -> bytes:
    return json.dumps({"exit_code": exit_code, "signal": sig, "error": error}).encode()


def exit_frame(exit_code: int | None, sig: int | None = None, error: str = "") -> bytes:
    """An unsealed EXIT: only the refusal of a hello, before any session exists."""
    return frame(EXIT, exit_body(exit_code, sig, error))


def flat_object(data: bytes, what: str) -> dict[str, Any]:
    """`data` as one JSON object whose values are scalars; ValueError for anything else,
    nesting too deep for the parser included (`[[[[...` raises RecursionError in json)."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        raise ValueError(f"{what} is not one JSON object") from None
    if not isinstance(body, dict) or any(isinstance(v, (dict, list)) for v in body.values()):
        raise ValueError(f"{what} is not a flat JSON object")
    return body


def challenge_frame(nonce: bytes) -> bytes:
    return frame(CHALLENGE, json.dumps({"v": VERSION, "nonce": nonce.hex()}).encode())


def _nonce(value: Any, what: str) -> bytes:
    try:
        nonce = bytes.fromhex(str(value or ""))
    except ValueError:
        nonce = b""
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"{what} is not a nonce of {NONCE_BYTES} bytes")
    return nonce


def read_challenge(data: bytes) -> bytes:
    """The nonce of a CHALLENGE frame's body; ValueError if it is not one of this version."""
    body = flat_object(data, "the challenge")
    if body.get("v") != VERSION:
        raise ValueError(f"the task service does not speak version {VERSION}")
    return _nonce(body.get("nonce"), "the challenge")


def _mac(
    purpose: bytes,
    credential: str,
    nonces: bytes,
    job_id: str,
    attempt: int,
    host: str,
) -> bytes:
    """HMAC-SHA256(credential, purpose || nonce_s || nonce_c || job \\0 attempt \\0 host):
    good for one connection's pair of nonces, one attempt and one host only."""
    context = purpose + nonces + f"{job_id}\0{attempt}\0{host}".encode()
    return hmac.new(credential.encode(), context, hashlib.sha256).digest()


def proof(
    credential: str,
    nonces: bytes,
    job_id: str,
    attempt: int,
    host: str,
    purpose: bytes = CLIENT_PROOF,
) -> str:
    """A proof of the credential (hex) for the connection whose nonces are `nonces` (the
    server's, then the client's): the client's hello by default, SERVER_PROOF for READY."""
    return _mac(purpose, credential, nonces, job_id, attempt, host).hex()


def session_key(credential: str, nonces: bytes, job_id: str, attempt: int, host: str) -> bytes:
    return _mac(SESSION, credential, nonces, job_id, attempt, host)


def hello_frame(
    credential: str,
    nonce: bytes,
    job_id: str,
    attempt: int,
    host: str,
    own_nonce: bytes,
) -> bytes:
    """The hello answering the challenge `nonce` with the client's `own_nonce`."""
    body = {
        "v": VERSION,
        "job_id": job_id,
        "attempt": attempt,
        "host": host,
        "nonce": own_nonce.hex(),
        "proof": proof(credential, nonce + own_nonce, job_id, attempt, host),
    }
    return frame(HELLO, json.dumps(body, separators=(",", ":")).encode())


def ready_frame(credential: str, nonces: bytes, job_id: str, attempt: int, host: str) -> bytes:
    body = {"proof": proof(credential, nonces, job_id, attempt, host, SERVER_PROOF)}
    return frame(READY, json.dumps(body).encode())


class Session:
    """Seals and opens the frames after the handshake, for one end of one connection.

    A sealed frame is `channel | length | payload | tag`, the tag HMAC-SHA256(session key,
    direction || sequence:u64 || channel || payload). Each direction counts its frames from
    0, so a frame checks only at its own place in its own direction. Not thread-safe per
    direction: one thread sends, one receives."""

    def __init__(self, key: bytes, to_server: bool) -> None:
        self.key = key
        self.mine, self.theirs = (TO_SERVER, TO_CLIENT) if to_server else (TO_CLIENT, TO_SERVER)
        self.sent = 0
        self.received = 0

    def _tag(self, direction: bytes, sequence: int, channel: int, payload: bytes) -> bytes:
        head = direction + SEQUENCE.pack(sequence) + bytes([channel])
        return hmac.new(self.key, head + payload, hashlib.sha256).digest()

    def seal(self, channel: int, payload: bytes) -> bytes:
        tag = self._tag(self.mine, self.sent, channel, payload)
        self.sent += 1
        return frame(channel, payload + tag)

    def open(self, channel: int, body: bytes) -> bytes:
        """The payload of the next frame from the other end; NotProven if its tag is not the
        one that frame must carry (forged, replayed, reordered, or from the other way)."""
        if len(body) < TAG_BYTES:
            raise NotProven("a frame too short to carry its check")
        payload, tag = body[:-TAG_BYTES], body[-TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(self.theirs, self.received, channel, payload)):
            raise NotProven("a frame that fails its check (not from the other end)")
        self.received += 1
        return payload

    def request_frame(self, request: dict[str, Any]) -> bytes:
        return self.seal(REQUEST, json.dumps(request, separators=(",", ":")).encode())

    def exit_frame(self, exit_code: int | None, sig: int | None = None, error: str = "") -> bytes:
        return self.seal(EXIT, exit_body(exit_code, sig, error))


class ClientHandshake:
    """The client's side of the handshake, without I/O: `hello` answers the challenge,
    `session` checks READY's proof and gives the session (NotProven where it is wrong)."""

    def __init__(self, credential: str, job_id: str, attempt: int, host: str) -> None:
        self.credential = credential
        self.job_id = job_id
        self.attempt = attempt
        self.host = host
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self.nonces = b""

    def hello(self, challenge: bytes) -> bytes:
        """The HELLO frame for a CHALLENGE frame's body (ValueError for a bad one)."""
        server_nonce = read_challenge(challenge)
        self.nonces = server_nonce + self.nonce
        return hello_frame(
            self.credential, server_nonce, self.job_id, self.attempt, self.host, self.nonce
        )

    def session(self, ready: bytes) -> Session:
        """The session, once READY's body proves the credential over both nonces."""
        try:
            body = flat_object(ready, "the answer to the hello")
        except ValueError:
            raise NotProven("no proof") from None
        expected = proof(
            self.credential, self.nonces, self.job_id, self.attempt, self.host, SERVER_PROOF
        )
        if not self.nonces or not hmac.compare_digest(
            str(body.get("proof", "")).encode(), expected.encode()
        ):
            raise NotProven("a wrong proof")
        key = session_key(self.credential, self.nonces, self.job_id, self.attempt, self.host)
        return Session(key, to_server=True)
