package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaBackends returns an in-process kfake cluster (one broker, one
// partition per topic by default, no topic auto-creation, transactions on;
// closed when the test ends) and, when BRIDGE_TEST_KAFKA_SEEDS is set, the
// real broker. Addr is a comma-separated seed list (see Seeds).
func KafkaBackends(t testing.TB) []Backend {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(1),
		kfake.ClusterID("testenv-kfake"),
		kfake.BrokerConfigs(map[string]string{
			// Same bound as the real broker's default.
			"transaction.max.timeout.ms": "900000",
		}),
	)
	if err != nil {
		t.Fatalf("starting kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	out := []Backend{{Name: "kfake", Addr: strings.Join(c.ListenAddrs(), ","), Real: false}}
	if b, ok := realBackend(t, ServiceKafka, EnvKafkaSeeds, "real-kafka"); ok {
		out = append(out, b)
	}
	return out
}

// Seeds splits a Kafka Backend.Addr into the seed list kgo.SeedBrokers takes.
func Seeds(addr string) []string {
	var out []string
	for s := range strings.SplitSeq(addr, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// NewTopic creates a topic with a unique name (UniqueName with prefix) and the
// given partitions and configs on the backend, deletes it when the test ends,
// and returns its name. It waits until the topic's partitions have leaders.
func NewTopic(t testing.TB, b Backend, prefix string, partitions int32, configs map[string]*string) string {
	t.Helper()
	topic := UniqueName(t, prefix)
	cl, err := kgo.NewClient(kgo.SeedBrokers(Seeds(b.Addr)...))
	if err != nil {
		t.Fatalf("creating admin client for %s: %v", b.Name, err)
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		cl.Close()
		t.Fatalf("creating topic %s on %s: %v", topic, b.Name, err)
	}
	t.Cleanup(func() {
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopic(ctx, topic); err != nil {
			t.Logf("deleting topic %s on %s: %v", topic, b.Name, err)
		}
	})
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == int(partitions) && allLeaders(td) {
				return topic
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for leaders of topic %s on %s: %v", topic, b.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func allLeaders(td kadm.TopicDetail) bool {
	for _, p := range td.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}
