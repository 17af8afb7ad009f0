"""Token signing keys: Ed25519 keypairs in the controller's state directory, chosen by `kid`.

Layout: `<state_dir>/auth/` (0700) holds one `<kid>.pem` private key per key (0600) and
`keys.json` naming the current key and when each older key was retired. Tokens are signed
with the current key and carry its `kid`; verification looks the key up by `kid`, so after
a rotation tokens signed with the old key stay valid until they expire. A retired key is
deleted once every token it could have signed has expired (`retired_at + max_ttl_s`).

Why Ed25519 (EdDSA) and not HS256: the verifying half is public, so a standby or any other
verifier never needs a secret that could also mint tokens, and the verifier's algorithm list
holds only `EdDSA`, which closes the HS256-signed-with-the-public-key confusion.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from xce.auth.files import atomic_write, private_dir


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: Ed25519PrivateKey
    retired_at: float | None = None

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    def public_pem(self) -> bytes:
        return self.public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


class KeyStore:
    """The signing keys of one cluster; created on first use, rotated on request."""

    def __init__(self, directory: Path, max_ttl_s: float) -> None:
        self.directory = directory
        self.max_ttl_s = max_ttl_s
        self.keys: dict[str, SigningKey] = {}
        self.current_kid = ""
        self._load()

    @property
    def current(self) -> SigningKey:
        return self.keys[self.current_kid]

    def get(self, kid: str) -> SigningKey | None:
        key = self.keys.get(kid)
        if key is None or (
            key.retired_at is not None and key.retired_at + self.max_ttl_s < time.time()
        ):
            return None
        return key

    def rotate(self) -> SigningKey:
        """Make a new current key; the old one keeps verifying until its tokens expire."""
        now = time.time()
        if self.current_kid:
            old = self.keys[self.current_kid]
            self.keys[old.kid] = SigningKey(old.kid, old.private, now)
        key = SigningKey(self._new_kid(), Ed25519PrivateKey.generate())
        pem = key.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        atomic_write(self.directory / f"{key.kid}.pem", pem)
        self.keys[key.kid] = key
        self.current_kid = key.kid
        self._save()
        return key

    def _new_kid(self) -> str:
        return time.strftime("%Y%m%d", time.gmtime()) + "-" + secrets.token_hex(4)

    def _load(self) -> None:
        private_dir(self.directory)
        index = self.directory / "keys.json"
        if not index.exists():
            self.rotate()
            return
        data = json.loads(index.read_text())
        self.current_kid = data["current"]
        for kid, retired_at in data["keys"].items():
            pem = (self.directory / f"{kid}.pem").read_bytes()
            private = serialization.load_pem_private_key(pem, password=None)
            if not isinstance(private, Ed25519PrivateKey):
                raise ValueError(f"{kid}.pem is not an Ed25519 key")
            self.keys[kid] = SigningKey(kid, private, retired_at)
        self._prune()

    def _prune(self) -> None:
        gone = [k for k, key in self.keys.items() if k != self.current_kid and self.get(k) is None]
        for kid in gone:
            del self.keys[kid]
        if gone:
            self._save()
            for kid in gone:
                (self.directory / f"{kid}.pem").unlink(missing_ok=True)

    def _save(self) -> None:
        data = {
            "current": self.current_kid,
            "keys": {k: key.retired_at for k, key in self.keys.items()},
        }
        atomic_write(self.directory / "keys.json", json.dumps(data, indent=1).encode())


def key_dir(state_dir: Path) -> Path:
    """Where a controller keeps its signing keys and revocations."""
    return state_dir / "auth"
