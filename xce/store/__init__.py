"""Durable storage on local disk, no database: the event log (WAL), checkpoints, job files.

    event ──encode (xce/wire)──▶ wal/writer (group commit: many records, one fdatasync)
                                       │
    checkpoint (temp file, fsync, rename, fsync dir; the last two kept) ◀── durable
                                       │
    start: recovery = newest checkpoint that verifies + the WAL after it, replayed

* `wal/`: record framing (length + CRC), segment files, the writer thread, the reader;
  a torn tail is cut, damage in the middle refuses to start (`repair` keeps a copy).
* `durable`: the log and checkpoints as the controller uses them.
* `recovery`: the state a controller starts from.
* `files`: uploads and job outputs stored through the API (no shared storage);
  `replicated_names`: the names under which they travel to the standbys.
"""
