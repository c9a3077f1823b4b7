package pipeline

import (
	"context"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// The live stream's commits are pipelined. At a watermark the run loop
// hands the open transaction to a commit job (commit, startCommit), whose
// goroutine flushes it, writes the control events, ends the transaction in
// Kafka and then writes the checkpoint to the store, while the run loop
// goes on reading, decoding and encoding the next microbatch. The encoded
// batches of the next transaction are held (heldBatch) until the job's
// Kafka commit has ended: franz-go has one transaction at a time, and a
// record of the next transaction produced before a commit that then fails
// would be in no transaction the checkpoint knows. So:
//
//   - commits and checkpoint writes keep their order: a commit starts only
//     after the previous job has ended, checkpoint write included (settle);
//   - a failed commit stops the run loop before it produces anything read
//     after it (the held batches are dropped, and the stream restarts from
//     its checkpoint and Kafka);
//   - what the run loop holds is bounded: at most maxHeldBatches batches or
//     half of kafka.max_buffered_bytes; then it waits for the Kafka commit.
//
// Everything other than data and watermarks (reorgs, reconnects, aborts,
// the data topic's set-up, shutdown) settles first, so it sees the state
// after the last commit, as before.

// maxHeldBatches bounds the encoded batches held for the next transaction
// while the previous one commits.
const maxHeldBatches = 32

// commitJob is one commit of the live stream in flight.
type commitJob struct {
	// kafka is closed when the Kafka commit has ended, with kafkaErr and
	// kafkaAt set; done when the job has ended, with err set.
	kafka    chan struct{}
	done     chan struct{}
	kafkaErr error
	kafkaAt  time.Time
	err      error

	// Set by commit before the job starts.
	pending []pendingBatch
	snap    reorg.Snapshot
	full    bool
	// from is when the transaction's last record was produced (or the
	// commit began, for one without records): where the stall between
	// transactions starts (txn_boundary_seconds).
	from  time.Time
	build func(ctx context.Context, flushed sink.Committed) (offsets.Watermark, *offsets.Checkpoint, error)

	// Set by the job for finishCommit.
	ends map[int32]int64
	res  commitResult
}

// heldBatch is an encoded batch of the next transaction waiting for the
// previous transaction's Kafka commit.
type heldBatch struct {
	slab    *slab
	out     produceBatch
	readyAt time.Time // when it was encoded
}

// startCommit runs job j: the Kafka commit, then the checkpoint write. It
// is detached from ctx's cancellation: a shutdown waits for the commit in
// flight (settle), each step bounded by its own timeout, instead of
// turning it into an unknown outcome.
func (r *Stream) startCommit(ctx context.Context, j *commitJob, undos []offsets.Undo) {
	j.kafka, j.done = make(chan struct{}), make(chan struct{})
	r.job, r.bound = j, j
	jctx := context.WithoutCancel(ctx)
	prod := r.prod
	go func() {
		defer close(j.done)
		res, cp, err := r.commitKafka(jctx, prod, undos, func(flushed sink.Committed) (offsets.Watermark, *offsets.Checkpoint, error) {
			return j.build(jctx, flushed)
		})
		j.res, j.kafkaErr, j.kafkaAt = res, err, r.deps.Now()
		close(j.kafka)
		if err != nil {
			j.err = err
			return
		}
		j.err = r.storeCommitted(jctx, cp)
	}()
}

// settle waits for the commit in flight, if any, applies it, and produces
// the batches held for the next transaction. Its error is the commit's
// (the held batches are then dropped) or the producer's.
func (r *Stream) settle(ctx context.Context) error {
	if err := r.joinCommit(); err != nil {
		return err
	}
	return r.produceHeld(ctx)
}

// joinCommit waits for the commit in flight, if any, to end, and applies its
// outcome; on an error it drops the held batches, which must not be
// produced.
func (r *Stream) joinCommit() error {
	j := r.job
	if j == nil {
		return nil
	}
	<-j.done
	r.job = nil
	if j.err != nil {
		r.dropHeld()
		r.commitErr = j.err
		return j.err
	}
	r.finishCommit(j)
	return nil
}

// kafkaCommitted reports whether the commit in flight (if any) has ended
// in Kafka, waiting for it when wait is set. A failed commit is joined and
// its error returned.
func (r *Stream) kafkaCommitted(wait bool) (bool, error) {
	j := r.job
	if j == nil {
		return true, nil
	}
	if wait {
		<-j.kafka
	} else {
		select {
		case <-j.kafka:
		default:
			return false, nil
		}
	}
	if j.kafkaErr != nil {
		return false, r.joinCommit()
	}
	return true, nil
}

// hold queues an encoded batch of the open transaction and produces the
// queue once the commit in flight has ended in Kafka: at once when none
// is in flight, else when it has ended or the queue is full.
func (r *Stream) hold(ctx context.Context, b heldBatch) error {
	r.held = append(r.held, b)
	r.heldBytes += b.slab.out.Size()
	full := len(r.held) >= maxHeldBatches || r.heldBytes >= r.deps.Kafka.MaxBufferedBytes/2
	ok, err := r.kafkaCommitted(full)
	if err != nil || !ok {
		return err
	}
	return r.produceHeld(ctx)
}

// produceHeldNow produces the held batches once the commit in flight has
// ended in Kafka, waiting for it: before the run loop waits for room
// among the process's slabs out (encodeSlabs), since only it can let go of
// them.
func (r *Stream) produceHeldNow(ctx context.Context) error {
	if len(r.held) == 0 {
		return nil
	}
	ok, err := r.kafkaCommitted(true)
	if err != nil || !ok {
		return err
	}
	return r.produceHeld(ctx)
}

// produceHeld produces the held batches, in order, in the open
// transaction (begun if none is). The commit in flight, if any, must have
// ended in Kafka.
func (r *Stream) produceHeld(ctx context.Context) error {
	for len(r.held) > 0 {
		b := r.held[0]
		if err := r.begin(b.readyAt); err != nil {
			r.dropHeld()
			return err
		}
		r.held[0] = heldBatch{}
		r.held = r.held[1:]
		r.heldBytes -= b.slab.out.Size()
		_, err := b.out.produce(ctx, r.prod, r.limit, b.slab)
		b.slab.done()
		if err != nil {
			r.dropHeld()
			return r.produceError(err)
		}
		r.txn.lastProduced = r.deps.Now()
	}
	r.held, r.heldBytes = r.held[:0], 0
	return nil
}

// dropHeld drops the held batches (their transaction is aborted).
func (r *Stream) dropHeld() {
	for i, b := range r.held {
		b.slab.done()
		r.held[i] = heldBatch{}
	}
	r.held, r.heldBytes = r.held[:0], 0
}

// observeBoundary records the stall between the last committed
// transaction and the first record of the next, as the next transaction
// begins with a record ready at readyAt: from the previous transaction's
// last record to now, or, when the record was ready only after the
// previous commit ended in Kafka (the bridge was waiting for Amp, not for
// Kafka), to that end.
func (r *Stream) observeBoundary(readyAt time.Time) {
	j := r.bound
	if j == nil {
		return
	}
	r.bound = nil
	select {
	case <-j.kafka:
	default:
		return // not reached: records are produced after the Kafka commit
	}
	end := r.deps.Now()
	if readyAt.After(j.kafkaAt) {
		end = j.kafkaAt
	}
	r.deps.Metrics.txnBoundary.WithLabelValues(r.cfg.ID).Observe(max(0, end.Sub(j.from).Seconds()))
}
