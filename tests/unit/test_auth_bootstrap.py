"""`ensure_credentials`: the one way `xce up` and `xce init` make a cluster's credentials."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from xce.auth.backends.configfile import UsersFile
from xce.auth.bootstrap import ensure_credentials, token_service, write_private
from xce.auth.passwords import verify_password
from xce.config.auth import AuthSettings
from xce.core.errors import Unauthorized


def test_first_run_makes_the_admin_the_key_and_both_tokens(tmp_path: Path) -> None:
    auth = AuthSettings()
    password = ensure_credentials(
        tmp_path, auth, tmp_path / "controller", "ann", True, admin_groups=("admins",)
    )
    assert password
    ann = UsersFile(tmp_path / "users.toml").load()["ann"]
    assert ann.roles == ("admin",) and ann.groups == ("admins",)
    assert verify_password(password, ann.password)
    tokens = token_service(auth, tmp_path / "controller")
    admin = tokens.verify((tmp_path / "admin.token").read_text().strip())
    assert (admin.user, admin.groups, admin.roles, admin.kind) == (
        "ann",
        ("admins",),
        ("admin",),
        "user",
    )
    worker = tokens.verify((tmp_path / "worker.token").read_text().strip())
    assert (worker.roles, worker.kind) == (("worker",), "service")
    for name in ("users.toml", "admin.token", "worker.token"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    assert (tmp_path / "controller" / "auth" / "keys.json").exists()


def test_later_runs_keep_a_good_token_and_renew_an_expiring_one_for_its_subject(
    tmp_path: Path,
) -> None:
    auth = AuthSettings()
    ensure_credentials(tmp_path, auth, tmp_path / "controller", "ann", True)
    before = (tmp_path / "admin.token").read_text()
    assert ensure_credentials(tmp_path, auth, tmp_path / "controller", "bob", False) is None
    assert (tmp_path / "admin.token").read_text() == before  # still good: untouched

    tokens = token_service(auth, tmp_path / "controller")
    old, _ = tokens.issue("ann", ("ops",), ("admin",), ttl_s=60, now=time.time() - 3600)
    write_private(tmp_path / "admin.token", old + "\n")
    ensure_credentials(tmp_path, auth, tmp_path / "controller", "bob", False)
    renewed = tokens.verify((tmp_path / "admin.token").read_text().strip())
    assert (renewed.user, renewed.groups, renewed.roles) == ("ann", ("ops",), ("admin",))


def test_the_worker_token_is_bound_to_this_host(tmp_path: Path) -> None:
    """`xce up` and `xce init` issue the node's worker token as joining does: subject and
    host claim are the worker's name, so a copy cannot register another host."""
    auth = AuthSettings()
    ensure_credentials(tmp_path, auth, tmp_path / "controller", "ann", True, worker_host="node1")
    tokens = token_service(auth, tmp_path / "controller")
    worker = tokens.verify((tmp_path / "worker.token").read_text().strip())
    assert (worker.user, worker.host, worker.roles, worker.kind) == (
        "node1",
        "node1",
        ("worker",),
        "service",
    )
    kept = (tmp_path / "worker.token").read_text()
    ensure_credentials(tmp_path, auth, tmp_path / "controller", "ann", False, worker_host="node1")
    assert (tmp_path / "worker.token").read_text() == kept  # still good: untouched
    # Renamed worker: a token for the new name.
    ensure_credentials(tmp_path, auth, tmp_path / "controller", "ann", False, worker_host="node2")
    assert tokens.verify((tmp_path / "worker.token").read_text().strip()).host == "node2"


def test_the_old_shared_worker_token_is_replaced_and_revoked(tmp_path: Path) -> None:
    auth = AuthSettings()
    ensure_credentials(tmp_path, auth, tmp_path / "controller", "ann", True)
    tokens = token_service(auth, tmp_path / "controller")
    shared, _ = tokens.issue("worker", (), ("worker",), "service", now=time.time() - 5)
    write_private(tmp_path / "worker.token", shared + "\n")
    ensure_credentials(tmp_path, auth, tmp_path / "controller", "ann", False, worker_host="node1")
    fresh = token_service(auth, tmp_path / "controller")  # as the controller reads it
    assert fresh.verify((tmp_path / "worker.token").read_text().strip()).host == "node1"
    with pytest.raises(Unauthorized, match="revoked"):
        fresh.verify(shared)


def test_the_new_password_is_kept_0600_until_shown(tmp_path: Path) -> None:
    """A start may fail between making the admin and printing the password: the only copy
    of it must survive that, and go once it has been shown."""
    from xce.auth.bootstrap import PASSWORD_FILE, password_shown, pending_password

    password = ensure_credentials(tmp_path, AuthSettings(), tmp_path / "controller", "ann", True)
    assert password and pending_password(tmp_path) == password
    assert stat.S_IMODE((tmp_path / PASSWORD_FILE).stat().st_mode) == 0o600
    # A later start makes no new password and keeps the one not yet shown.
    assert (
        ensure_credentials(tmp_path, AuthSettings(), tmp_path / "controller", "ann", False) is None
    )
    assert pending_password(tmp_path) == password
    password_shown(tmp_path)
    assert pending_password(tmp_path) is None and not (tmp_path / PASSWORD_FILE).exists()
