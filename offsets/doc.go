// Package offsets owns a stream's checkpoint and where it lives: the
// checkpoint model and its versioned encoding, a Redis store and an embedded
// file store, both fenced by a version, the backfill partition records, and
// the reconciliation of the store with Kafka's control topic on start
// (design.md §5 steps 4 and 5, §7).
//
// # The checkpoint
//
// A [Checkpoint] holds, for one stream id: a Version that grows by one per
// commit; the fingerprint of the stream's SQL and Arrow schema; the reorg
// state machine's [reorg.Snapshot] (next sequence, retained watermarks; the
// newest watermark is the resume cursor); the retained batch log, each batch
// with its sequence, batch id, ranges and the data-topic offset spans of its
// records (where retractions read the original rows back from) and the
// registry id of the schema they were written with; the control-topic offset
// of the stream's last control event; and the commit time. [Marshal] writes
// it as compact JSON with a "format" field (the oldest format that holds it:
// 1, or 2 once a batch records a schema id); the form is deterministic and
// tested byte for byte against testdata/checkpoint_v1.golden.json and
// checkpoint_v2.golden.json. [Unmarshal] reads formats 1 and 2, is strict
// (unknown fields and other formats are errors) and runs
// [Checkpoint.Validate], which names every inconsistency it finds.
//
// # Guarantees
//
//   - Store.Commit is a compare-and-set: it succeeds only when the store holds
//     Version-1 (nothing stored counts as 0), atomically against every other
//     writer of the same stream. A refused commit returns a [*StaleError]
//     (errors.Is [ErrFenced]) that says which version the writer expected,
//     which one is stored, and what that means: a newer version stored means
//     another instance of the stream runs or this one was superseded (stop
//     this one); an older or missing one means the store lost writes (restart,
//     and reconciliation repairs it from Kafka). The store is then unchanged.
//   - A retried commit of exactly the stored checkpoint succeeds, so a commit
//     whose reply was lost can be retried safely.
//   - [RedisStore]: one Lua EVAL per commit (works on Redis 7.0 and miniredis;
//     no FUNCTION/FCALL, no WAITAOF). Keys are the configured prefix, the
//     stream id in braces, and a suffix: "ampbridge:{erc20}:checkpoint" (a
//     hash with fields version and data) and "ampbridge:{erc20}:backfill".
//     The braces are a Redis Cluster hash tag: a stream's keys share a slot.
//   - [FileStore]: one file per stream, replaced by write to a temporary
//     file, fsync, rename and fsync of the directory, under an flock on
//     "<stream>.lock" that excludes other goroutines and other processes. A
//     crash leaves the old or the new file, never a torn one; leftover
//     temporary files are ignored and removed by the next commit.
//   - [Reconcile] is a pure decision over the stored checkpoint and the newest
//     committed control event read from Kafka ([ControlState]); [Recover]
//     wires it to a [Store] and a [ControlReader] and commits a repaired or
//     rebuilt checkpoint. Every [Outcome] has a metric label. The bridge
//     implements [ControlReader]; when the control event carries the
//     Marshal bytes of the checkpoint being committed, [ControlStateOf]
//     turns them into the [ControlState] it returns; when it carries only
//     the batches it committed and the stream's state after it ([Delta]),
//     [RollForward] rebuilds the checkpoint from the newest earlier event
//     that carries one.
//
// # Durability settings
//
// Run Redis with appendonly yes and appendfsync always: every acknowledged
// write is then on disk before the reply, and a kill -9 of redis-server loses
// no checkpoint (tested). With appendfsync everysec (Redis' default once AOF
// is on) a crash can lose about a second of checkpoints. [NewRedisStore]
// checks both settings with CONFIG GET and logs a warning when they are
// weaker, or when it cannot check (managed Redis often forbids CONFIG);
// it never fails for that. A lost checkpoint is not lost data: on start the
// control topic is ahead of the store and the checkpoint is repaired from it.
// The embedded store fsyncs file and directory on every commit.
//
// # Pitfalls
//
//   - The control topic is the proof of what was published. If it is deleted,
//     recreated, or its retention removes the stream's newest event (a stream
//     idle for longer than retention.ms), the store is "ahead of Kafka" and
//     the stream refuses to start ([ErrStoreAhead]); if retention removed the
//     full checkpoint copy the newest watermark is rebuilt from, a start
//     without the store fails with [ErrControlTruncated]. Give the control
//     topic unlimited retention (retention.ms=-1, how the bridge creates it);
//     never compaction, which keeps only each stream's newest event, usually
//     one without a checkpoint copy.
//   - [Control] never reads the whole control topic to recover: it searches
//     backwards from the end for the stream's newest live watermark
//     ([Control.Newest]) and reads from the full copy that watermark names.
//     [Control.Scan] streams a range to a callback for the readers that need
//     a stream's whole history (rewind, a fresh stream's backfill progress).
//   - Redis replication is asynchronous: a failover to a replica that missed
//     the newest commits looks like lost writes ([StaleError] with an older
//     version); restarting the stream reconciles it from Kafka.
//   - A Redis ACL user needs PING, HGET, HMGET, HSET, HGETALL, EVAL and
//     EVALSHA on the prefix's keys ("~ampbridge:*"): [RedisACLRules]. CONFIG
//     GET (+config|get) is optional: without it the durability check is
//     skipped with a warning. A wrong password, a missing permission and a
//     failed TLS handshake are [*RedisAccessError]s ([ErrRedisAuth],
//     [ErrRedisPermission], [ErrRedisTLS]) naming the configuration key or
//     the ACL rule that fixes them; retrying does not.
//   - Two deployments must not use the same stream id against one store: the
//     second is fenced, by design.
//   - Changing the SQL or its Arrow schema under the same stream id is refused
//     by Recover ([ErrFingerprintChanged]); restore the SQL or use a new
//     stream id. [RecoverEvolving] lets the change through, named in
//     Decision.Changed, for a caller that checks it (schema evolution).
//   - The file store needs a local file system with flock (not NFS) and a
//     unix system; use Redis elsewhere.
//   - The embedded form includes reorg's JSON of snapshots and block ranges:
//     a change there changes the checkpoint format and must bump
//     FormatVersion (TestMarshalGolden and TestMarshalMatchesEncodingJSON
//     fail first).
package offsets
