# The replication link between a primary and its standbys (xce/ha). Written by hand;
# ordinals are append-only so that candidates of neighbouring versions still talk.
#
# On the TCP (+TLS) stream every message is framed like a WAL record
# (length:u32le | crc32:u32le | payload, padded to 8 bytes; xce/store/wal/framing.py).
# WAL records travel exactly as they lie on the primary's disk: `Records.data` is a run of
# framed `WalEntry` messages of xce/wire/xce.capnp, so the standby verifies each one's CRC
# and writes the same bytes to its own WAL.

@0xe3b1c2d4f5a60718;

struct ReplMessage {
  epoch @0 :UInt64;          # the sender's current epoch: fencing on every frame
  union {
    hello @1 :Hello;          # standby -> primary, first frame
    welcome @2 :Welcome;      # primary -> standby: how the stream will start
    records @3 :Records;      # primary -> standby
    ack @4 :Ack;              # standby -> primary: durable on the standby's disk
    heartbeat @5 :Heartbeat;  # primary -> standby, when there is nothing else to send
    snapshotChunk @6 :SnapshotChunk;  # primary -> standby: a checkpoint file, in pieces
    authFiles @7 :List(NamedFile);    # primary -> standby: signing keys, revocations, groups
    refuse @8 :Text;          # either side, then close: why
    promote @9 :Promote;      # primary -> standby: take over now (switchover)
    fileData @10 :FileData;   # primary -> standby: a job file, the users file, audit lines
    fileAck @11 :FileAck;     # standby -> primary: file operations up to a ticket are durable
    fileWant @12 :FileWant;   # standby -> primary: files its records name that it lacks
    handOver @13 :HandOver;   # primary -> the other standbys: a switchover's target
  }
}

struct Hello {
  node @0 :Text;             # the standby's candidate URL
  token @1 :Text;            # a service token with cluster:replicate
  lastSeq @2 :UInt64;        # last record durable on the standby
  lastEpoch @3 :UInt64;      # epoch of that record
  wantSnapshot @4 :Bool;     # start over from a checkpoint: a record did not apply here
  history @5 :List(UInt64);  # the standby's epoch history, flattened [epoch, firstSeq, ...]
  lastCrc @6 :UInt32;        # CRC32 of its last record's frame: compared by content
  lastCrcKnown @7 :Bool;     # false when its log ends at a checkpoint (no record to read)
  auditSize @8 :UInt64;      # bytes of the standby's audit log ...
  auditSha @9 :Data;         # ... and their SHA-256: the primary sends only what follows
  files @10 :Bool;           # it takes fileData and may send fileAck/fileWant
  # What the standby's build is and reads (xce/core/versions.py); 0 or "" from a build
  # before versions were sent (format 1). The primary refuses a standby that cannot read
  # the records or checkpoints it writes, naming both.
  release @11 :Text;
  walFormat @12 :UInt32;
  checkpointFormat @13 :UInt32;
  protocol @14 :UInt32;
}

struct Welcome {
  startSeq @0 :UInt64;       # first record the stream will carry
  snapshot @1 :Bool;         # a checkpoint transfer comes first (the standby starts over)
  mode @2 :Text;             # "async" or "sync"
  history @3 :List(UInt64);  # the primary's epoch history, flattened [epoch, firstSeq, ...]
  files @4 :Bool;            # it sends fileData and takes fileAck/fileWant
  release @5 :Text;          # the primary's build and what it writes: a standby that
  walFormat @6 :UInt32;      # cannot read them stops following (and will not take over)
  checkpointFormat @7 :UInt32;
  protocol @8 :UInt32;
}

struct Records {
  firstSeq @0 :UInt64;
  count @1 :UInt32;
  data @2 :Data;
}

struct Ack {
  durableSeq @0 :UInt64;
}

struct Heartbeat {
  lastSeq @0 :UInt64;
  sentAt @1 :Float64;
}

struct SnapshotChunk {
  seq @0 :UInt64;            # the checkpoint's WAL position
  data @1 :Data;
  last @2 :Bool;
}

struct NamedFile {
  name @0 :Text;
  data @1 :Data;
}

struct Promote {
  seq @0 :UInt64;            # the primary's last record: the standby must hold it
}

# A switchover: the primary tells every standby but the target whom it hands its role to,
# so that they vote for that target although they still follow this primary (and for no
# one else). A standby of a version without it drops the link and reconnects.
struct HandOver {
  target @0 :Text;           # the target's candidate URL
  seq @1 :UInt64;            # the primary's last record (the target holds it)
}

# Files travel beside the records (xce/ha/files.py). `name` is logical: `files/<path>` under
# the controller's file store (job inputs and outputs), `users` (the users file), `audit`
# (the audit log). A `put` comes in chunks (offset, last) and is checked against `sha256`
# (the content address) before it replaces the standby's copy; `drop` removes a file or
# directory; `append` adds audit lines at `offset` (the standby's size must match).
struct FileData {
  ticket @0 :UInt64;         # acknowledged (FileAck) once the operation is durable; 0: none
  name @1 :Text;
  op @2 :Text;               # "put", "drop" or "append"
  sha256 @3 :Data;           # put: of the whole file
  offset @4 :UInt64;
  data @5 :Data;
  last @6 :Bool;
}

struct FileAck {
  ticket @0 :UInt64;
}

struct FileWant {
  names @0 :List(Text);
}
