package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// NoAnswer wraps err as "<service> did not answer: err" when err is a
// deadline: the context's (an operator command's -timeout) or a call's own
// timeout (a gRPC DEADLINE_EXCEEDED, a network i/o timeout). Otherwise, and
// for nil, it returns err unchanged. service names the service with its
// address (AmpService, KafkaService, StoreService), so that a command that
// hangs on one of several services says which.
func NoAnswer(service string, err error) error {
	if err == nil {
		return nil
	}
	var t interface{ Timeout() bool }
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &t) && t.Timeout()) {
		return fmt.Errorf("%s did not answer: %w", service, err)
	}
	return err
}

// AmpService names the Amp server of c: "amp at host:port".
func AmpService(c *source.Client) string { return "amp at " + c.Addr() }

// KafkaService names the Kafka cluster of brokers: "kafka at
// b1:9092,b2:9092".
func KafkaService(brokers []string) string { return "kafka at " + strings.Join(brokers, ",") }

// StoreService names a checkpoint store by its String method ("checkpoint
// store redis at host:port"), or "the checkpoint store".
func StoreService(store any) string {
	if s, ok := store.(fmt.Stringer); ok {
		return s.String()
	}
	return "the checkpoint store"
}
