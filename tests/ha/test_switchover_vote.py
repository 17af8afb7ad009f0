"""The race of a switchover on the primary's side, played on a real candidate (in-process).

The primary asks its standby to take over; the standby votes for itself in the next epoch,
which its health page shows at once, then asks the primary for its vote. When the primary's
probe reads that page first (a loaded machine: CI saw it), the primary has *seen* the epoch
before it is asked for it. It must step down and still grant it: otherwise the switchover's
target loses the vote, and with the old primary gone quiet while it steps down, the target
claims a later epoch alone a failover timeout later (epoch 4 instead of 2, and a pause of
writes) or the old primary campaigns against it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from xce.config.loader import parse_config
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.ha.node import Node
from xce.ha.probe import PeerStatus
from xce.store.durable import DurableLog, StoreSettings

PRIMARY, TARGET = "http://127.0.0.1:17001", "http://127.0.0.1:17003"


def primary_of_epoch_1(tmp_path: Path) -> Node:
    config = parse_config(
        {
            "cluster": {"controllers": [PRIMARY, TARGET]},
            "controller": {"listen": "127.0.0.1:17001", "state_dir": str(tmp_path)},
        }
    )
    node = Node(config, True, StoreSettings())
    assert node.epochs.vote(1, node.url)
    node.epochs.begin_term(1, 1, node.url)
    node.role = "primary"
    return node


def handing_over(node: Node, target: str = TARGET) -> None:
    """The primary's state once its switchover chose `target` (xce/ha/source.py)."""
    node.switching = True
    node.source = SimpleNamespace(handing_to=target)  # type: ignore[assignment]


def target_vote(epoch: int = 2) -> dict[str, object]:
    return {"epoch": epoch, "candidate": TARGET, "last_epoch": 1, "last_seq": 0}


def test_a_primary_handing_over_grants_the_epoch_its_probe_saw_first(tmp_path: Path) -> None:
    node = primary_of_epoch_1(tmp_path)
    handing_over(node)
    # Its probe of the target reads the target's own vote for epoch 2 (a standby's page).
    node._heed([PeerStatus(TARGET, 1, True, role="standby", epoch=2, seen=2)])
    assert node.role == "standby" and node.step_down_event.is_set()  # no writes from here
    assert node.epochs.epoch == 2 and node.epochs.voted_epoch == 1
    answer = node.answer_vote(target_vote())
    assert answer["granted"], answer["reason"]
    assert (node.epochs.voted_epoch, node.epochs.voted_for) == (2, TARGET)
    # One vote per epoch still: nobody else gets epoch 2 from it, nor an older one.
    assert not node.answer_vote({**target_vote(), "candidate": PRIMARY})["granted"]
    refused = node.answer_vote(target_vote(1))
    assert not refused["granted"] and "already voted in epoch 2" in refused["reason"]


def test_the_vote_asked_first_is_granted_too(tmp_path: Path) -> None:
    """The other order of the same race: the request arrives before the probe."""
    node = primary_of_epoch_1(tmp_path)
    handing_over(node)
    assert node.answer_vote(target_vote())["granted"]
    assert node.role == "standby"
    node._heed([PeerStatus(TARGET, 1, True, role="standby", epoch=2, seen=2)])
    assert node.epochs.epoch == 2


def test_a_primary_handing_over_votes_for_its_target_only(tmp_path: Path) -> None:
    node = primary_of_epoch_1(tmp_path)
    handing_over(node, "http://127.0.0.1:17005")
    refused = node.answer_vote(target_vote())
    assert not refused["granted"] and "handing its role over" in refused["reason"]
    assert node.role == "primary"


def test_a_standby_votes_for_the_target_its_primary_named_and_for_no_one_else(
    tmp_path: Path,
) -> None:
    """Three candidates: a standby that still hears its primary defers to the switchover's
    target (whatever its rank), so any caught-up standby can be chosen."""
    third = "http://127.0.0.1:17005"
    config = parse_config(
        {
            "cluster": {"controllers": [PRIMARY, TARGET, third]},
            "controller": {"listen": "127.0.0.1:17003", "state_dir": str(tmp_path)},
        }
    )
    node = Node(config, False, StoreSettings())
    node.role = "standby"
    node.follower = SimpleNamespace(  # type: ignore[assignment]
        primary=PRIMARY, last_contact=time.monotonic(), handover=None, last_epoch=1, durable_seq=0
    )
    to_third = {**target_vote(), "candidate": third}
    refused = node.answer_vote(to_third)
    assert not refused["granted"] and "follows" in refused["reason"]
    node.follower.handover = (third, time.monotonic())  # type: ignore[union-attr]
    assert not node.answer_vote(target_vote(3))["granted"]  # not the named target
    answer = node.answer_vote({**to_third, "epoch": 3})
    assert answer["granted"], answer["reason"]


def test_a_primary_not_handing_over_still_refuses(tmp_path: Path) -> None:
    node = primary_of_epoch_1(tmp_path)
    refused = node.answer_vote(target_vote())
    assert not refused["granted"] and "is the primary of epoch 1" in refused["reason"]
    assert node.role == "primary" and node.epochs.voted_epoch == 1


def with_log(node: Node, tmp_path: Path, records: int) -> DurableLog:
    """Give the primary a real log of `records` records of its epoch 1."""
    store = DurableLog.open(tmp_path / "log", StoreSettings())
    store.writer.epoch = 1
    for n in range(records):
        store.append(ev.QueueCreated(1.0, QueueRecord(f"q{n}")))
    asyncio.run(store.writer.sync(durable=True))
    node.store = store
    return store


def test_a_primary_stepping_down_still_compares_logs(tmp_path: Path) -> None:
    """From the review: while a primary that stepped down shuts down, its API answers votes
    (`Route.any_role`) and its log must still count: read as empty, it granted a candidate
    whose log is shorter, which would lose the records only this one holds."""
    node = primary_of_epoch_1(tmp_path)
    store = with_log(node, tmp_path, 30)
    shorter = {**target_vote(3), "last_seq": 12}
    assert not node.answer_vote(shorter)["granted"]
    node._heed([PeerStatus(TARGET, 1, True, role="standby", epoch=2, seen=2)])
    assert node.role == "standby"
    assert node.log_position() == (1, 30) and node.health()["seq"] == 30
    refused = node.answer_vote(shorter)
    assert not refused["granted"] and "ahead" in refused["reason"]
    assert node.answer_vote({**target_vote(3), "last_seq": 30})["granted"]  # as long: yes
    asyncio.run(store.writer.close())


class Prober:
    """The other candidates' answers to a campaign (real ones come over HTTP)."""

    def __init__(self, peers: list[PeerStatus], answers: dict[int, dict[str, Any]]) -> None:
        self.peers, self.answers = peers, answers

    async def others(self) -> list[PeerStatus]:
        return self.peers

    async def ask_vote(self, rank: int, request: dict[str, Any], token: str) -> dict[str, Any]:
        return self.answers[rank]


def test_a_campaign_that_hears_of_a_newer_epoch_does_not_serve(tmp_path: Path) -> None:
    """From the review: a majority granted epoch 2, but a refusal named epoch 3 (another
    candidate already voted for itself in it). Serving 2 then would write records tagged 3
    (the epoch seen) beside the primary 3 may get: the campaign is lost, as in Raft, and a
    term already overtaken is never begun."""
    third = "http://127.0.0.1:17005"
    config = parse_config(
        {
            "cluster": {"controllers": [PRIMARY, TARGET, third]},
            "controller": {"listen": "127.0.0.1:17001", "state_dir": str(tmp_path)},
        }
    )
    node = Node(config, True, StoreSettings())
    peers = [
        PeerStatus(TARGET, 1, True, role="standby"),
        PeerStatus(third, 2, True, role="standby"),
    ]
    node.prober = Prober(  # type: ignore[assignment]
        peers,
        {
            1: {"granted": True, "epoch": 1, "reason": ""},
            2: {"granted": False, "epoch": 2, "reason": "already voted in epoch 2"},
        },
    )
    assert asyncio.run(node.campaign.campaign(peers)) is False
    assert node.epochs.epoch == 2 and node._claimed == 0
    # the same majority without news of a newer epoch wins
    node.campaign.next_campaign = 0.0
    node.prober.answers[2] = {"granted": False, "epoch": 1, "reason": "busy"}  # type: ignore[attr-defined]
    assert asyncio.run(node.campaign.campaign(peers)) is True and node._claimed == 3
    with pytest.raises(RuntimeError, match="overtaken"):
        node.epochs.observe(4)
        node.epochs.begin_term(3, 1, node.url)


def test_a_term_overtaken_while_promoting_is_not_served(tmp_path: Path) -> None:
    """From the second review: a probe started before (`claimed_epoch`) may hear of a newer
    epoch while the candidate promotes; it follows again instead of serving (or crashing)."""
    node = primary_of_epoch_1(tmp_path)
    node.role = "standby"
    store = with_log(node, tmp_path, 3)
    node.store = None
    assert node.epochs.vote(2, node.url)
    node._claimed, node._promoting = 2, True
    node.epochs.observe(3)
    served: list[object] = []

    async def run_primary(n: Node, s: DurableLog) -> str:
        served.append(s)
        return "stop"

    assert asyncio.run(node._primary(store, run_primary, None)) == "step_down"
    assert served == [] and node.role == "standby" and not node._promoting
    assert node.epochs.history == [(1, 1)] and node.log_position() == (1, 3)
