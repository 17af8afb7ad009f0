"""`xce init --site-config PATH`: the client settings every account of a node reads.

Why: the cluster directory is 0700 (it holds the keys and the admin's token), so a user on a
login node can read neither its `client.toml` nor its CA certificate, and without the CA no
https:// controller verifies. The site file (clients read `/etc/xce/client.toml`, or
`XCE_SITE_CONFIG`, after their own settings) names the controllers and a public copy of the
cluster CA *certificate* beside it (`ca.pem`, 0644; never the CA key). Both are written 0644
whatever the umask, atomically (a reader never sees half a file), and never inside the
cluster directory, whose `client.toml` is the admin's.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from xce.core.errors import InvalidRequest

CA_NAME = "ca.pem"


@dataclass(frozen=True)
class SiteConfig:
    path: Path
    ca_file: Path | None
    # Directories above the file that other accounts cannot enter: they would not read it.
    closed: tuple[Path, ...] = ()


def check_site_path(path: Path, cluster_dir: Path) -> Path:
    """The absolute site file path; refused inside the cluster directory (private, and its
    client.toml is the admin's), before anything is written."""
    site = path.expanduser().resolve()
    cluster = cluster_dir.expanduser().resolve()
    if site.is_relative_to(cluster):
        raise InvalidRequest(
            f"--site-config {site} is inside the cluster directory {cluster}, which only its "
            "owner may read: put the site config elsewhere (clients read /etc/xce/client.toml "
            "by default), or the cluster directory elsewhere (e.g. /var/lib/xce)"
        )
    if site.is_dir():
        raise InvalidRequest(f"--site-config {site} is a directory: name the file to write")
    existing = next(d for d in site.parents if d.exists())
    if not os.access(existing, os.W_OK):  # say so now, not after the cluster was made
        raise InvalidRequest(f"--site-config {site}: cannot write in {existing}")
    return site


def _write_public(path: Path, data: bytes) -> None:
    """Replace `path` with `data`, mode 0644, in one rename."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _closed_dirs(path: Path) -> tuple[Path, ...]:
    """The folders above `path` that other accounts may not enter (no o+x)."""
    return tuple(d for d in path.parents if d.exists() and not d.stat().st_mode & stat.S_IXOTH)


def write_site_config(
    path: Path, cluster_dir: Path, controllers: tuple[str, ...], ca_pem: Path | None
) -> SiteConfig:
    """Write the site file with `controllers` and, for an https cluster, `ca_pem` copied
    to `ca.pem` beside it. Returns what was written and any folder that hides it."""
    site = check_site_path(path, cluster_dir)
    if not site.parent.exists():
        site.parent.mkdir(parents=True, mode=0o755)
        site.parent.chmod(0o755)  # whatever the umask: every account must enter it
    ca_copy: Path | None = None
    if ca_pem is not None:
        ca_copy = site.parent / CA_NAME
        _write_public(ca_copy, ca_pem.read_bytes())
    lines = [
        "# XCE client settings for every account on this node, written by `xce init`.",
        "# Read after each user's own ~/.config/xce/client.toml and XCE_* variables, which",
        "# win; XCE_SITE_CONFIG names another file.",
        "controllers = [" + ", ".join(f'"{u}"' for u in controllers) + "]",
    ]
    if ca_copy is not None:
        lines.append(f'ca_file = "{ca_copy}"  # the cluster CA certificate (public)')
    _write_public(site, ("\n".join(lines) + "\n").encode())
    return SiteConfig(site, ca_copy, _closed_dirs(site))
