package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// cmdSchema prints the Avro schemas each stream registers.
func cmdSchema(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("schema", flag.ContinueOnError)
	streamID := fs.String("stream", "", "stream (default: every stream)")
	network := fs.String("network", "", "network for topics named with {network}")
	b, err := openFromFlags(ctx, fs, args, stderr, true)
	if err != nil {
		return err
	}
	defer b.close()
	cfg := b.cfg
	found := false
	for _, sc := range cfg.Streams {
		if *streamID != "" && sc.ID != *streamID {
			continue
		}
		found = true
		s, err := b.amp.Schema(ctx, sc.SQL)
		if err != nil {
			return fmt.Errorf("stream %s: planning its SQL at Amp: %w", sc.ID, err)
		}
		var nets []string
		if *network != "" {
			nets = []string{*network}
		}
		topic, err := sc.TopicName(nets)
		if err != nil {
			return fmt.Errorf("%w (pass -network)", err)
		}
		encCfg, err := sc.EncodeConfig(topic, buildVersion())
		if err != nil {
			return err
		}
		schemas, err := encode.BuildSchemas(encCfg, s)
		if err != nil {
			return fmt.Errorf("stream %s: %w", sc.ID, err)
		}
		fmt.Fprintf(stdout, "# stream %s: subject %s\n%s\n", sc.ID, encode.ValueSubject(topic), indentJSON(schemas.Value))
		if schemas.Key != "" {
			fmt.Fprintf(stdout, "# stream %s: subject %s\n%s\n", sc.ID, encode.KeySubject(topic), indentJSON(schemas.Key))
		}
	}
	if !found {
		return fmt.Errorf("no stream %q in the configuration", *streamID)
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
	b, err := openFromFlags(ctx, flag.NewFlagSet("status", flag.ContinueOnError), args, stderr, true)
	if err != nil {
		return err
	}
	defer b.close()
	return b.status(ctx, stdout, time.Now())
}

func (b *bridge) status(ctx context.Context, w io.Writer, now time.Time) error {
	store := b.cfg.Checkpoint.Store
	if store == "redis" {
		store = "redis " + b.cfg.Checkpoint.Redis.Addr
	} else {
		store = "file " + b.cfg.Checkpoint.Dir
	}
	for _, sc := range b.cfg.Streams {
		cp, err := b.store.Load(ctx, sc.ID)
		if errors.Is(err, offsets.ErrNotFound) {
			fmt.Fprintf(w, "%s: no checkpoint yet (store %s)\n", sc.ID, store)
			b.printBackfill(ctx, w, sc)
			continue
		}
		if err != nil {
			return fmt.Errorf("stream %s: loading its checkpoint: %w", sc.ID, err)
		}
		fmt.Fprintf(w, "%s: cursor %s\n", sc.ID, cursorText(cp.Cursor()))
		fmt.Fprintf(w, "  checkpoint version %d, committed %s (%s ago), store %s\n", cp.Version,
			cp.CommittedAt.Format(time.RFC3339), now.Sub(cp.CommittedAt).Round(time.Second), store)
		fmt.Fprintf(w, "  retained batches %d (retention %d blocks), next sequence %d, control offset %d\n",
			len(cp.Batches), sc.RetentionBlocks, cp.Snapshot.Next, cp.ControlOffset)
		b.printBackfill(ctx, w, sc)
		heads, err := b.syncedHeads(ctx, sc.SQL)
		if err != nil {
			fmt.Fprintf(w, "  head lag: unknown (%v)\n", err)
			continue
		}
		for _, net := range cp.Cursor().Networks() {
			head, ok := heads[net]
			if !ok {
				fmt.Fprintf(w, "  head lag %s: unknown (Amp reports no synced range for it)\n", net)
				continue
			}
			lag := int64(head) - int64(cp.Cursor()[net].Number)
			fmt.Fprintf(w, "  head lag %s: %d block(s) (Amp synced to %d)\n", net, lag, head)
		}
	}
	return nil
}

// printBackfill prints the partition records of the stream's backfill.
func (b *bridge) printBackfill(ctx context.Context, w io.Writer, sc config.StreamConfig) {
	ps, ok := b.store.(offsets.PartitionStore)
	if !ok || !sc.Backfill.Enabled {
		return
	}
	recs, err := ps.Partitions(ctx, sc.ID)
	if err != nil {
		fmt.Fprintf(w, "  backfill: unknown (%v)\n", err)
		return
	}
	done := 0
	for _, p := range recs {
		if p.Done {
			done++
		}
	}
	fmt.Fprintf(w, "  backfill: %d partition(s) recorded, %d done\n", len(recs), done)
	for _, p := range recs {
		switch {
		case p.Done:
			fmt.Fprintf(w, "    [%d, %d) done\n", p.From, p.To)
		case p.Last != nil:
			fmt.Fprintf(w, "    [%d, %d) published up to block %d\n", p.From, p.To, p.Last.Number)
		}
	}
}

// syncedHeads asks Amp how far the stream's tables are synced: a batch
// query's completion metadata carries, per network, the synced range of the
// tables the plan reads (amp-protocol.md §2.6), whatever rows it returns.
// The query returns none: it is the backfill partition of the empty span
// [0, 0) on _block_num.
func (b *bridge) syncedHeads(ctx context.Context, sql string) (map[string]uint64, error) {
	q, err := source.PartitionSQL(sql, "_block_num", 0, 0)
	if err != nil {
		return nil, err
	}
	st, err := b.amp.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	heads := map[string]uint64{}
	for {
		env, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return heads, nil
		}
		if err != nil {
			return nil, err
		}
		if env.Complete {
			for _, r := range env.Ranges {
				heads[r.Network] = r.End
			}
		}
		env.Release()
	}
}
