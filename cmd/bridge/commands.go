package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/ops"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// errVerifyFailed is returned when verify found differences.
var errVerifyFailed = errors.New("verification found differences")

// streams returns the configured streams named id (every stream when id is
// empty), or an error naming the unknown id.
func (b *bridge) streams(id string) ([]config.StreamConfig, error) {
	var out []config.StreamConfig
	for _, sc := range b.cfg.Streams {
		if id == "" || sc.ID == id {
			out = append(out, sc)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no stream %q in the configuration", id)
	}
	return out, nil
}

// cmdRewind retracts everything a stream committed from a block on and
// makes it resume there.
func cmdRewind(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rewind", flag.ContinueOnError)
	streamID := fs.String("stream", "", "the stream to rewind (required)")
	to := fs.Uint64("to-block", math.MaxUint64, "the first block to retract and publish again (required)")
	ctx, cancel, b, err := openCommand(ctx, fs, args, stderr, false, needAll)
	if err != nil {
		return err
	}
	defer cancel()
	defer b.close()
	if *streamID == "" || *to == math.MaxUint64 {
		return fmt.Errorf("rewind needs -stream and -to-block: %w", errUsage)
	}
	res, err := b.rewind(ctx, *streamID, *to)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "stream %s rewound: %d batch(es) with %d row(s) retracted; it resumes after %s\n",
		*streamID, res.Batches, res.Rows, pipeline.CursorText(res.Cursor))
	return nil
}

func (b *bridge) rewind(ctx context.Context, id string, to uint64) (ops.RewindResult, error) {
	if id == "" {
		return ops.RewindResult{}, fmt.Errorf("rewind needs -stream: %w", errUsage)
	}
	scs, err := b.streams(id)
	if err != nil {
		return ops.RewindResult{}, err
	}
	return ops.Rewind(ctx, scs[0], b.deps(id), to)
}

// cmdVerify compares streams' topics with a fresh query at Amp.
func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	streamID := fs.String("stream", "", "stream to verify (default: every stream)")
	ctx, cancel, b, err := openCommand(ctx, fs, args, stderr, true, needAmp|needKafka|needRegistry)
	if err != nil {
		return err
	}
	defer cancel()
	defer b.close()
	reps, err := b.verify(ctx, *streamID)
	for _, rep := range reps {
		ops.WriteVerifyReport(stdout, rep)
	}
	return err
}

// verify verifies one stream (or all when id is empty); the error is
// errVerifyFailed when a report found differences.
func (b *bridge) verify(ctx context.Context, id string) ([]ops.VerifyReport, error) {
	scs, err := b.streams(id)
	if err != nil {
		return nil, err
	}
	reader, err := sink.NewReader(ctx, b.kafka, sink.Deps{Logger: b.log})
	if err != nil {
		return nil, pipeline.NoAnswer(pipeline.KafkaService(b.kafka.Brokers), err)
	}
	defer reader.Close()
	v := &ops.Verifier{Amp: b.amp, Reader: reader, Control: b.control, ControlTopic: b.cfg.Kafka.ControlTopic,
		Registry: b.registry, Version: buildVersion(), CanonicalWait: b.verifyWait}
	var reps []ops.VerifyReport
	failed := false
	for _, sc := range scs {
		rep, err := v.Verify(ctx, sc)
		if err != nil {
			return reps, fmt.Errorf("verifying stream %s: %w", sc.ID, err)
		}
		reps = append(reps, rep)
		failed = failed || !rep.OK()
	}
	if failed {
		return reps, errVerifyFailed
	}
	return reps, nil
}

// cmdSchema prints the Avro schemas each stream registers.
func cmdSchema(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("schema", flag.ContinueOnError)
	streamID := fs.String("stream", "", "stream (default: every stream)")
	network := fs.String("network", "", "network for topics named with {network}")
	ctx, cancel, b, err := openCommand(ctx, fs, args, stderr, true, needAmp)
	if err != nil {
		return err
	}
	defer cancel()
	defer b.close()
	scs, err := b.streams(*streamID)
	if err != nil {
		return err
	}
	for _, sc := range scs {
		res, err := ops.Schema(ctx, b.amp, sc, *network, buildVersion())
		if err != nil {
			return err
		}
		res.WriteText(stdout)
	}
	return nil
}

// cmdStatus prints each stream's checkpoint: cursor, version, last commit,
// retained batches and the store; in cluster mode also the group and each
// stream's owner.
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ctx, cancel, b, err := openCommand(ctx, flag.NewFlagSet("status", flag.ContinueOnError), args, stderr, true, needAmp|needStore)
	if err != nil {
		return err
	}
	defer cancel()
	defer b.close()
	if b.cfg.Cluster.Enabled {
		// Who owns what is the group's, in Kafka.
		if err := b.connect(ctx, needKafka); err != nil {
			return err
		}
	}
	return b.status(ctx, stdout, time.Now())
}

// clusterStatus describes the cluster group and who owns each stream
// (cluster mode; b connected to Kafka).
func (b *bridge) clusterStatus(ctx context.Context) (ops.ClusterStatus, error) {
	reader, err := sink.NewReader(ctx, b.kafka, sink.Deps{Logger: b.log})
	if err != nil {
		return ops.ClusterStatus{}, pipeline.NoAnswer(pipeline.KafkaService(b.kafka.Brokers), err)
	}
	defer reader.Close()
	st, err := ops.Cluster(ctx, b.admin, reader, b.cfg.Group(), b.cfg.Streams)
	return st, pipeline.NoAnswer(pipeline.KafkaService(b.kafka.Brokers), err)
}

func (b *bridge) status(ctx context.Context, w io.Writer, now time.Time) (err error) {
	store := "file " + b.cfg.Checkpoint.Dir
	if b.cfg.Checkpoint.Store == config.StoreRedis {
		store = "redis " + b.cfg.Checkpoint.Redis.Addr
	}
	heads := func(ctx context.Context, sql string) (map[string]uint64, error) {
		h, err := pipeline.SyncedHeads(ctx, b.amp, sql)
		return h, pipeline.NoAnswer(pipeline.AmpService(b.amp), err)
	}
	// What a running bridge says of its streams, when it serves /readyz.
	running, runErr := ops.RunningHealth(ctx, b.cfg.HTTP.Addr)
	// A service that did not answer before the command's deadline fails
	// the command once everything it could say is printed.
	var unanswered error
	defer func() {
		if unanswered != nil && ctx.Err() != nil && err == nil {
			err = unanswered
		}
	}()
	// In cluster mode, who owns each stream; an error (a missing ACL) is
	// returned once the checkpoints are printed.
	var cluster *ops.ClusterStatus
	var clusterErr error
	if b.cfg.Cluster.Enabled {
		cs, err := b.clusterStatus(ctx)
		if err != nil {
			clusterErr = fmt.Errorf("bridge status: cluster mode: %w", err)
			fmt.Fprintf(w, "cluster group %s: unknown (%v)\n", b.cfg.Cluster.Group, err)
		} else {
			cluster = &cs
			cs.WriteText(w)
		}
	}
	defer func() {
		if err == nil {
			err = clusterErr
		}
	}()
	for _, sc := range b.cfg.Streams {
		st, err := ops.Status(ctx, b.store, heads, sc, now)
		if err != nil {
			return err
		}
		if cluster != nil {
			if o, ok := cluster.Owner(sc.ID); ok {
				st.Owner = &o
			}
		}
		if running != nil {
			if r, ok := running.Streams[sc.ID]; ok {
				st.Running = &r
			}
		}
		st.RunningErr = runErr
		unanswered = cmp.Or(unanswered, st.HeadsErr, st.BackfillErr)
		st.WriteText(w, store)
	}
	return nil
}
