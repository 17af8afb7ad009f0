"""The candidates as a primary's GET /api/v1/cluster shows them (`candidate_rows`): a
standby's lag is what it acknowledged on the primary's stream, not the log end it claims."""

from __future__ import annotations

from xce.ha.node_base import candidate_rows
from xce.ha.probe import PeerStatus

A, B, C = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"


def test_a_diverged_standby_shows_its_lag_on_the_primarys_stream() -> None:
    """A standby that restarted with records the new primary never had claims a log end as
    far as the primary's (lag 0 by its own word) while the checkpoint that replaces its log
    is still on the way: the primary's session says it has acknowledged nothing yet."""
    peers = [
        PeerStatus(B, 1, True, "standby", 5, seq=60141, primary=A),
        PeerStatus(C, 2, True, "standby", 5, seq=60100, primary=A),
    ]
    standbys = [{"node": B, "acked_seq": 0, "lag_records": 60150, "in_sync": False}]
    rows = {r["url"]: r for r in candidate_rows(60150, peers, standbys)}
    assert rows[B]["lag_records"] == 60150  # not the 9 its own log end suggests
    assert rows[C]["lag_records"] == 50  # no session: by its log end, as before
    assert rows[B]["seq"] == 60141 and rows[B]["self"] is False


def test_an_unreachable_or_refused_standby_has_no_lag() -> None:
    peers = [PeerStatus(B, 1, False), PeerStatus(C, 2, True, "standby", seq=10)]
    refused = [
        {
            "node": C,
            "incompatible": "release 9 writes formats this one cannot read",
            "in_sync": False,
            "lag_records": None,
        }
    ]
    rows = {r["url"]: r for r in candidate_rows(20, peers, refused)}
    assert rows[B]["lag_records"] is None and rows[C]["lag_records"] is None
