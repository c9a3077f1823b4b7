package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/twmb/franz-go/pkg/kfake"
)

// kfakeOptions configure serveKfake.
type kfakeOptions struct {
	// Port is the broker's port on 127.0.0.1; 0 picks a free one.
	Port int
	// AddrFile, if set, receives the broker's host:port once it listens.
	AddrFile string
	// Blackhole accepts produce requests without storing the records
	// (kfake.BlackholeProduce): offsets, last stable offsets and
	// transactions still advance, nothing can be consumed. It keeps a
	// long throughput run from holding every record in memory.
	Blackhole bool
}

// serveKfake runs a single-broker kfake cluster (transactions and
// idempotence supported, topics created on request) until ctx ends.
func serveKfake(ctx context.Context, logger *slog.Logger, o kfakeOptions) error {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(o.Port)}
	if o.Blackhole {
		opts = append(opts, kfake.BlackholeProduce())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("starting kfake: %w", err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	if o.AddrFile != "" {
		if err := os.WriteFile(o.AddrFile, []byte(addr+"\n"), 0o644); err != nil {
			return fmt.Errorf("writing address file: %w", err)
		}
	}
	logger.Info("serving kfake", "addr", addr, "blackhole", o.Blackhole)
	<-ctx.Done()
	logger.Info("kfake stopped")
	return nil
}
