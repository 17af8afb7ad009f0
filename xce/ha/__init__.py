"""High availability: standby controllers that follow the primary's WAL stream (Cap'n Proto
frames over TCP + TLS) and elect a new primary by priority and epoch when it is lost.

A `Node` (node.py) is one controller candidate; the primary ships records through its
`ReplicationSource` (source.py), a standby applies them through its follower (follower.py),
and elections (campaign.py, election.py, epochs.py) fence an old primary by epoch.
"""
