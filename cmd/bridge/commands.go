package main

import (
	"cmp"
	"context"
	"encoding/json"
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
		printReport(stdout, rep)
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

func printReport(w io.Writer, v ops.VerifyReport) {
	fmt.Fprintf(w, "verify %s (topic %s, blocks up to %d): %d records read, %d rows retracted\n",
		v.Stream, v.Topic, v.UpToBlock, v.Records, v.Retracted)
	fmt.Fprintf(w, "  expected %d rows: %d matching, %d missing, %d extra, %d duplicated, %d unretracted\n",
		v.Expected, v.Matching, v.Missing, v.Extra, v.Duplicated, v.Unretracted)
	for _, d := range v.Diffs {
		fmt.Fprintf(w, "  %s\n", d)
	}
	if v.OK() {
		fmt.Fprintln(w, "  verdict: OK (nothing missing, nothing extra, nothing duplicated)")
	} else {
		fmt.Fprintln(w, "  verdict: DIFFERENCES FOUND")
	}
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
		fmt.Fprintf(stdout, "# stream %s: subject %s\n%s\n", sc.ID, res.ValueSubject, indentJSON(res.Value))
		if res.Key != "" {
			fmt.Fprintf(stdout, "# stream %s: subject %s\n%s\n", sc.ID, res.KeySubject, indentJSON(res.Key))
		}
	}
	return nil
}

func indentJSON(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return s
	}
	return string(b)
}

// cmdStatus prints each stream's checkpoint: cursor, version, last commit,
// retained batches and the store.
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	ctx, cancel, b, err := openCommand(ctx, flag.NewFlagSet("status", flag.ContinueOnError), args, stderr, true, needAmp|needStore)
	if err != nil {
		return err
	}
	defer cancel()
	defer b.close()
	return b.status(ctx, stdout, time.Now())
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
	// A service that did not answer before the command's deadline fails
	// the command once everything it could say is printed.
	var unanswered error
	defer func() {
		if unanswered != nil && ctx.Err() != nil && err == nil {
			err = unanswered
		}
	}()
	for _, sc := range b.cfg.Streams {
		st, err := ops.Status(ctx, b.store, heads, sc, now)
		if err != nil {
			return err
		}
		unanswered = cmp.Or(unanswered, st.HeadsErr, st.BackfillErr)
		if st.Checkpoint == nil {
			fmt.Fprintf(w, "%s: no checkpoint yet (store %s)\n", sc.ID, store)
			printBackfill(w, st)
			continue
		}
		cp := st.Checkpoint
		fmt.Fprintf(w, "%s: cursor %s\n", sc.ID, pipeline.CursorText(cp.Cursor()))
		fmt.Fprintf(w, "  checkpoint version %d, committed %s (%s ago), store %s\n", cp.Version,
			cp.CommittedAt.Format(time.RFC3339), st.Age.Round(time.Second), store)
		fmt.Fprintf(w, "  retained batches %d (retention %d blocks), next sequence %d, control offset %d\n",
			len(cp.Batches), sc.RetentionBlocks, cp.Snapshot.Next, cp.ControlOffset)
		printBackfill(w, st)
		if st.HeadsErr != nil {
			fmt.Fprintf(w, "  head lag: unknown (%v)\n", st.HeadsErr)
			continue
		}
		for _, net := range cp.Cursor().Networks() {
			lag, ok := st.Lag(net)
			if !ok {
				fmt.Fprintf(w, "  head lag %s: unknown (Amp reports no synced range for it)\n", net)
				continue
			}
			fmt.Fprintf(w, "  head lag %s: %d block(s) (Amp synced to %d)\n", net, lag, st.Heads[net])
		}
	}
	return nil
}

// printBackfill prints the partition records of the stream's backfill.
func printBackfill(w io.Writer, st ops.StreamStatus) {
	if st.BackfillErr != nil {
		fmt.Fprintf(w, "  backfill: unknown (%v)\n", st.BackfillErr)
		return
	}
	if st.Backfill == nil {
		return
	}
	done := 0
	for _, p := range st.Backfill {
		if p.Done {
			done++
		}
	}
	fmt.Fprintf(w, "  backfill: %d partition(s) recorded, %d done; %s\n", len(st.Backfill), done, st.BackfillProgress)
	for _, p := range st.Backfill {
		switch {
		case p.Done:
			fmt.Fprintf(w, "    [%d, %d) done\n", p.From, p.To)
		case p.Last != nil:
			fmt.Fprintf(w, "    [%d, %d) published up to block %d\n", p.From, p.To, p.Last.Number)
		}
	}
}
