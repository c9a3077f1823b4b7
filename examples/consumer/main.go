// Command consumer is a downstream recipe for amp-kafka-bridge topics: it
// keeps the current rows of a data topic by applying the bridge's
// retractions and tombstones, the way a service or a stream processor must
// to stay correct across chain reorganisations.
//
// What it relies on (see the README for the full contract):
//
//   - read_committed: the bridge writes in Kafka transactions; an aborted
//     transaction (a crash, a reorg inside it) must stay invisible.
//   - Values are Avro in the Confluent wire format (magic byte 0, 4-byte
//     schema id); the writer schema is fetched from the registry by id.
//   - The value is a Debezium-style envelope: op "c" (live) or "r"
//     (backfill) inserts source.batch_id/source.row with the "after" row;
//     op "d" retracts that row ("before" carries the original row); a
//     tombstone (null value) removes every row of the batch its key names.
//
// Usage:
//
//	consumer -brokers 127.0.0.1:9092 -registry http://127.0.0.1:8081 -topic amp.transactions [-idle 2s]
//
// It prints one line per applied change ("+" insert, "-" retraction, "x"
// tombstone). With -idle it stops once no record arrived for that long and
// prints the table as JSON lines; without it, it runs until interrupted.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	brokers  []string
	registry string
	topic    string
	idle     time.Duration
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	registry := fs.String("registry", "http://127.0.0.1:8081", "schema registry URL")
	topic := fs.String("topic", "", "data topic written by amp-kafka-bridge (required)")
	idle := fs.Duration("idle", 0, "stop after no record arrived for this long and print the table (0: run until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *topic == "" {
		return errors.New("-topic is required: name the data topic of a bridge stream")
	}
	o := options{brokers: strings.Split(*brokers, ","), registry: *registry, topic: *topic, idle: *idle}
	reg, err := sr.NewClient(sr.URLs(o.registry))
	if err != nil {
		return fmt.Errorf("configuring the registry client: %w", err)
	}
	table := NewTable(reg)
	if err := consume(ctx, o, table, out); err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	for _, r := range table.Rows() {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "%d rows (%d inserts, %d retractions, %d tombstones removing %d rows)\n", table.Len(),
		table.Stats.Inserts, table.Stats.Retractions, table.Stats.Tombstones, table.Stats.RowsTombstoned)
	return nil
}

// consume reads the topic from the beginning, read_committed, into table
// until ctx ends or, with o.idle, until the topic was quiet that long.
func consume(ctx context.Context, o options, table *Table, out io.Writer) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(o.brokers...),
		kgo.ConsumeTopics(o.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if o.idle > 0 {
			pctx, cancel = context.WithTimeout(ctx, o.idle)
		}
		fetches := cl.PollFetches(pctx)
		idle := pctx.Err() != nil && ctx.Err() == nil
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) && !errors.Is(fe.Err, context.Canceled) {
				return fmt.Errorf("fetching %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		var applyErr error
		fetches.EachRecord(func(rec *kgo.Record) {
			if applyErr != nil {
				return
			}
			if applyErr = table.Apply(ctx, rec); applyErr == nil {
				fmt.Fprintln(out, change(rec))
			}
		})
		if applyErr != nil {
			return applyErr
		}
		if idle && fetches.NumRecords() == 0 {
			return nil
		}
	}
}

// change describes one applied record for the change log.
func change(rec *kgo.Record) string {
	hdr := map[string]string{}
	for _, h := range rec.Headers {
		hdr[h.Key] = string(h.Value)
	}
	switch {
	case rec.Value == nil:
		return fmt.Sprintf("x batch %s (blocks %s) removed", rec.Key, hdr["amp-range"])
	case hdr["amp-op"] == "d":
		return fmt.Sprintf("- batch %s (blocks %s) row retracted", rec.Key, hdr["amp-range"])
	default:
		return fmt.Sprintf("+ batch %s (blocks %s) row inserted", rec.Key, hdr["amp-range"])
	}
}
