"""A real OpenID Connect provider for the tests: tests/oidc/provider.mjs (npm oidc-provider)
under Node.js, over HTTPS with a certificate from the test's own CA, on a free loopback port.

The test generates the provider's signing keys, so it can also forge tokens the provider
*could* have signed (expired, wrong audience...) and tokens from keys it never had.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.auth_backends.slapd import free_port

OIDC_DIR = Path(__file__).resolve().parent.parent / "oidc"
CLIENT_ID = "xce"
QUICK_CLIENT_ID = "xce-quick"  # its device codes expire after 1 s
CONFIDENTIAL_CLIENT_ID = "xce-confidential"
CLIENT_SECRET = "xce-confidential-secret"
REDIRECT_URI = "http://127.0.0.1:9/xce/callback"
ALICE = {
    "preferred_username": "alice",
    "name": "Alice",
    "groups": ["hpc", "physics"],
    "userinfo_only": {"department": "theory"},
}


def node_available() -> str | None:
    """Why the provider cannot run here, or None when node and npm are present."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "Node.js and npm are needed for the OIDC provider (oidc-provider)"
    return None


def ensure_node_modules() -> None:
    """Install tests/oidc's locked packages once (CI runs `npm ci --prefix tests/oidc`)."""
    if not (OIDC_DIR / "node_modules" / "oidc-provider").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=OIDC_DIR,
            check=True,
            capture_output=True,
            timeout=300,
        )


def rsa_jwk(kid: str) -> tuple[rsa.RSAPrivateKey, dict[str, Any]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = RSAAlgorithm.to_jwk(key, as_dict=True)
    jwk.update(kid=kid, alg="RS256", use="sig")
    return key, jwk


def ec_jwk(kid: str) -> tuple[ec.EllipticCurvePrivateKey, dict[str, Any]]:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = ECAlgorithm.to_jwk(key, as_dict=True)
    jwk.update(kid=kid, alg="ES256", use="sig")
    return key, jwk


def clients() -> list[dict[str, Any]]:
    public = {
        "token_endpoint_auth_method": "none",
        "application_type": "native",
        "grant_types": ["authorization_code", "urn:ietf:params:oauth:grant-type:device_code"],
        "response_types": ["code"],
        "redirect_uris": [REDIRECT_URI],
    }
    return [
        {"client_id": CLIENT_ID, **public},
        {"client_id": QUICK_CLIENT_ID, **public},
        {
            **public,
            "client_id": CONFIDENTIAL_CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "token_endpoint_auth_method": "client_secret_basic",
            "application_type": "web",
        },
    ]


@dataclass
class OidcProvider:
    """A running provider; `issuer` is its https:// URL, `keys` its signing keys by kid."""

    root: Path
    ca_file: Path
    cert_file: Path
    key_file: Path
    port: int = field(default_factory=free_port)
    keys: dict[str, Any] = field(default_factory=dict)
    jwks: list[dict[str, Any]] = field(default_factory=list)
    device_interval: int = 1
    process: subprocess.Popen[str] | None = None
    output: list[str] = field(default_factory=list)

    @property
    def issuer(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def add_key(self, kid: str, kind: str = "RS256", first: bool = False) -> None:
        key, jwk = rsa_jwk(kid) if kind == "RS256" else ec_jwk(kid)
        self.keys[kid] = key
        if first:
            self.jwks.insert(0, jwk)
        else:
            self.jwks.append(jwk)

    def start(self) -> None:
        ensure_node_modules()
        config = self.root / f"provider-{self.port}.json"
        config.write_text(
            json.dumps(
                {
                    "port": self.port,
                    "cert_file": str(self.cert_file),
                    "key_file": str(self.key_file),
                    "jwks": {"keys": self.jwks},
                    "clients": clients(),
                    "accounts": {"alice-sub": ALICE},
                    "login_as": "alice-sub",
                    "device_interval": self.device_interval,
                }
            )
        )
        self.output = []
        self.process = subprocess.Popen(
            ["node", str(OIDC_DIR / "provider.mjs"), str(config)],
            cwd=OIDC_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        ready = threading.Event()

        def read() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line)
                if line.startswith("listening "):
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30) or self.process.poll() is not None:
            self.stop()
            raise RuntimeError("oidc provider did not start:\n" + "".join(self.output))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
