// Package sink is the Kafka side of the bridge's exactly-once publishing: a
// transactional franz-go producer, topic creation and validation, and exact
// read-back of committed records (for retractions and for the reconciliation
// read of the control topic).
//
// sink is a leaf (style.md §4): it imports no project package and no Arrow.
// The run loop hands it opaque bytes (Avro keys and values from the encoder,
// the checkpoint and control events) and gets back offsets; kgo types never
// leave the package.
//
// # Contract
//
// One Producer per stream (or backfill worker), transactional id
// "{prefix}.{id}" (TransactionalID), stable across restarts. The run loop
// drives it from one goroutine:
//
//	p.Begin()
//	p.Produce(ctx, rec) ...   // async; blocks while MaxBufferedBytes are buffered (backpressure)
//	committed, err := p.Commit(ctx)   // or p.Abort(ctx)
//
// Commit flushes, then EndTransaction(commit), and returns for each record
// Group (a batch id, or a name for a control event) its offset spans
// {topic, partition, first, last}; the run loop stores them in the
// checkpoint so a later reorg can read the rows back with Reader.ReadSpans.
// Transactions are closed only when the caller says: at a complete
// watermark, once Budget.Due (defaults 50,000 rows / 100 ms).
//
// Every error has one outcome (style H10), told apart with errors.Is:
//
//   - ErrAborted: a record failed, the flush was canceled, or the broker did
//     not attempt the commit (kerr.OperationNotAttempted or
//     TransactionAbortable: the sink issues EndTransaction(TryAbort)).
//     Nothing is visible; retry from the checkpoint with the same Producer.
//   - ErrFenced: ProducerFenced or InvalidProducerEpoch. Another instance
//     runs this stream: stop and exit non-zero. An InvalidProducerEpoch of
//     a transaction open for
//     longer than TransactionTimeout is the broker's abort of it (it bumps
//     the epoch) and is ErrUnknownOutcome instead.
//   - ErrUnknownOutcome: EndTransaction failed without a definite answer
//     (transport error, timeout, UNKNOWN_SERVER_ERROR), or the producer is
//     in a state it cannot leave. Close the Producer, restart, and re-derive
//     the state from Kafka (the control topic), because the transaction may
//     have committed.
//   - ErrDeliveryFailed: the at-least-once counterpart of ErrAborted; some
//     records may be visible.
//   - ErrNotAuthorized (*AuthorizationError): the brokers refused a
//     request for a missing ACL (TopicAuthorizationFailed,
//     TransactionalIDAuthorizationFailed, ClusterAuthorizationFailed,
//     GroupAuthorizationFailed). The error names the ACL, the principal
//     (Config.Principal) and the kafka-acls.sh command that grants it; a
//     failed record's transaction is aborted (ErrAborted too), a refused
//     transactional id leaves the Producer unusable, a refused cluster
//     membership or claim ends Group.Run. Permanent: RequiredACLs lists
//     what the bridge needs, ClusterACLs what cluster mode adds.
//
// After ErrFenced, ErrUnknownOutcome or a refused transactional id the
// Producer refuses all work.
//
// The first connection of every client (NewProducer, NewReader, NewAdmin)
// names what the brokers refuse: ErrAuthentication (the password),
// ErrSASLMechanism (a mechanism the listener does not enable),
// ErrUntrustedCertificate (the broker's certificate), ErrClientCertificate
// (the client's, for mutual TLS).
//
// # Topics
//
// Admin.EnsureTopics creates missing topics and validates existing ones,
// returning every problem at once as *TopicError (topic, what is wrong, how
// to fix it):
//
//   - a data topic in batch-key mode must not be compacted: all rows of a
//     batch share its key, and compaction would keep one row per batch.
//     compact,delete is allowed in row-key mode only;
//   - the control topic has exactly one partition, so the events of every
//     stream are totally ordered and one offset in the checkpoint locates
//     them. Its cleanup policy is delete, created with infinite retention
//     (retention.ms=-1): the reconciliation read replays every event after
//     the offset the checkpoint recorded, and an empty checkpoint store is
//     rebuilt from the last watermark of each stream, which for an idle
//     stream can be very old. Compaction would delete undo events and older
//     watermarks; finite retention would eventually delete an idle stream's
//     only watermark (a warning is logged for an existing control topic
//     with finite retention). Control events are small (one per
//     transaction), so the topic grows slowly;
//   - a partition count that differs from the one a running stream recorded
//     (TopicSpec.ExpectedPartitions) is an error at start: keys would hash
//     to other partitions, so retractions and tombstones would not follow
//     the rows they retract, and recorded spans would point at the wrong
//     partitions.
//
// # Reading back
//
// Reader sends its own Fetch requests (read_committed) to the partition
// leaders instead of running a consumer, because a consumer hides aborted
// records and transaction markers and therefore cannot tell how far it has
// read. ReadSpans returns exactly the records of the given spans, or a
// *MissingRecordsError when retention, DeleteRecords or compaction removed
// them. ControlBounds returns the control topic's log start and last stable
// offset, after waiting for transactions that were open at the call to end;
// ScanControl streams a range of it to a callback one fetch response at a
// time, each at most 1 MiB, so its memory is bounded however long the
// topic is, and a stop is seen between responses (ReadControl, which holds a whole range, is for tests). Each read
// is bounded by ctx and Config.ReadTimeout. The offsets package decides what
// the records mean and which ranges to read.
//
// # Pitfalls
//
//   - Create the stream's Producer before the reconciliation read. Its
//     InitProducerID fences a zombie instance and completes (aborts or
//     finishes) its pending transaction, so the read sees the final state.
//   - Kafka writes commit markers after EndTransaction returns, so the last
//     stable offset trails a commit briefly; ReadSpans waits for it. Any
//     producer's open transaction holds the last stable offset back, at
//     worst for its transaction.timeout.ms: keep TransactionTimeout small.
//   - Before creating the producers, PrepareHangingCheck; after, Check the
//     topics they write: a transaction the broker left open on them
//     although its coordinator completed it (a Kafka bug) would otherwise be
//     decided by the producer's next marker (ErrOrphanedTransaction).
//   - The data topic's retention must exceed the reorg retention window (in
//     time, at the chain's block rate), or the original rows of a deep
//     reorg cannot be read back and the stream stops with ErrRecordsMissing
//     (which the run loop reports as ErrDataTopicLost).
//   - Never let EnsureTopics create a data topic a stream has committed to
//     (TopicSpec.MustExist, ExpectedID, CommittedEnd): a recreated topic
//     silently loses the records the checkpoint points at.
//   - Produce groups one after the other: a group's span covers everything
//     between its first and last offset on a partition. If several streams
//     share a data topic, spans include the other streams' records; filter
//     read-back records by the amp-batch-id header.
//   - EndTransaction and aborts run detached from the caller's
//     cancellation (bounded by EndTxnTimeout), because canceling one in
//     flight would turn a clean outcome into an unknown one. A canceled ctx
//     during the flush aborts the transaction.
//   - In at-least-once mode (Delivery "at-least-once": idempotent producer,
//     no transactions, for brokers or ACLs without transactions) records
//     are visible as soon as they are written, Abort cannot take them back,
//     and a crash replays from the checkpoint: consumers see duplicates.
//     Use it only when transactions are impossible.
//   - On Apache Kafka 4.x (KIP-890) the first produce of a transaction
//     begun right after a commit often waits about 20 ms: the broker retries
//     the partition's transaction verification while the previous commit's
//     markers are written (broker setting
//     add.partitions.to.txn.retry.backoff.ms). Measured on one local broker:
//     ~23 ms flush, ~0.5 ms EndTransaction for 100 records.
//   - Consumers must read with isolation.level=read_committed; otherwise
//     they also see aborted records.
//   - franz-go v1.22.3 can acknowledge a client's first records to a topic
//     before it publishes the topic's partitions; an EndTransaction in that
//     gap aborts what it was told to commit and returns nil. Commit and
//     Abort wait for the partitions first (awaitPartitions). Anyone driving
//     a kgo transactional client directly must do the same.
//
// Metrics (on the injected prometheus.Registerer, namespace
// Config.MetricsNamespace): records_written_total{stream,op} (op from
// Record.Op or the amp-op header), txn_commits_total{stream},
// txn_aborts_total{stream,reason}, txn_duration_seconds{stream,outcome},
// txn_commit_seconds{stream}, and franz-go's kprom client metrics under the
// "kafka" subsystem with a stream label. Logs go to the injected
// *slog.Logger, franz-go's through kslog with its levels lowered one step
// (its Info, several lines per transaction, at Debug; its Debug at
// LevelKafkaDebug), so the default level shows no per-transaction line.
package sink
