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

from pathlib import Path

from xce.config import parse_config
from xce.ha.node import Node
from xce.ha.probe import PeerStatus
from xce.store.durable import StoreSettings

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


def target_vote(epoch: int = 2) -> dict[str, object]:
    return {"epoch": epoch, "candidate": TARGET, "last_epoch": 1, "last_seq": 0}


def test_a_primary_handing_over_grants_the_epoch_its_probe_saw_first(tmp_path: Path) -> None:
    node = primary_of_epoch_1(tmp_path)
    node.switching = True
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
    node.switching = True
    assert node.answer_vote(target_vote())["granted"]
    assert node.role == "standby"
    node._heed([PeerStatus(TARGET, 1, True, role="standby", epoch=2, seen=2)])
    assert node.epochs.epoch == 2


def test_a_primary_not_handing_over_still_refuses(tmp_path: Path) -> None:
    node = primary_of_epoch_1(tmp_path)
    refused = node.answer_vote(target_vote())
    assert not refused["granted"] and "is the primary of epoch 1" in refused["reason"]
    assert node.role == "primary" and node.epochs.voted_epoch == 1
