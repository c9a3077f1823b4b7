package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaReady retries one full round trip against the broker until it works
// or ctx ends.
// opts are further client options (a SASL user).
func kafkaReady(ctx context.Context, logger *slog.Logger, out io.Writer, brokers string, opts ...kgo.Opt) error {
	seeds := strings.Split(brokers, ",")
	start := time.Now()
	var last error
	for attempt := 1; ; attempt++ {
		version, err := roundTrip(ctx, seeds, opts...)
		if err == nil {
			fmt.Fprintf(out, "kafka ready at %s after %s (ApiVersions guess: %s)\n",
				brokers, time.Since(start).Round(10*time.Millisecond), version)
			return nil
		}
		last = err
		logger.Debug("kafka not ready", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for kafka at %s: %w (last error: %w)", brokers, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func roundTrip(ctx context.Context, seeds []string, opts ...kgo.Opt) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	suffix := hex.EncodeToString(b[:])
	topic := "__devstack_ready_" + suffix

	stepCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()

	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.TransactionalID("devstack-ready-" + suffix),
		kgo.DefaultProduceTopic(topic),
		kgo.RequestRetries(2),
	}, opts...)...)
	if err != nil {
		return "", fmt.Errorf("creating client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	vs, err := adm.ApiVersions(stepCtx)
	if err != nil {
		return "", fmt.Errorf("requesting ApiVersions: %w", err)
	}
	version := "unknown"
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			return "", fmt.Errorf("ApiVersions of broker %d: %w", v.NodeID, v.Err)
		}
		version = v.VersionGuess()
	}
	if _, err := adm.BrokerMetadata(stepCtx); err != nil {
		return "", fmt.Errorf("requesting metadata: %w", err)
	}
	resp, err := adm.CreateTopic(stepCtx, 1, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return "", fmt.Errorf("creating topic %s: %w", topic, err)
	}
	defer func() {
		delCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopic(delCtx, topic)
	}()
	// A committed transaction proves the transaction coordinator and its
	// internal topic work.
	if err := cl.BeginTransaction(); err != nil {
		return "", fmt.Errorf("beginning transaction: %w", err)
	}
	if err := cl.ProduceSync(stepCtx, &kgo.Record{Value: []byte("ready")}).FirstErr(); err != nil {
		_ = cl.EndTransaction(stepCtx, kgo.TryAbort)
		return "", fmt.Errorf("producing in a transaction: %w", err)
	}
	if err := cl.EndTransaction(stepCtx, kgo.TryCommit); err != nil {
		return "", fmt.Errorf("committing transaction: %w", err)
	}
	// A group offset fetch makes the broker create __consumer_offsets.
	if _, err := adm.FetchOffsets(stepCtx, "devstack-ready-"+suffix); err != nil &&
		!errors.Is(err, kerr.GroupIDNotFound) {
		return "", fmt.Errorf("fetching group offsets: %w", err)
	}
	delResp, err := adm.DeleteTopic(stepCtx, topic)
	if err == nil {
		err = delResp.Err
	}
	if err != nil {
		return "", fmt.Errorf("deleting topic %s: %w", topic, err)
	}
	return version, nil
}
