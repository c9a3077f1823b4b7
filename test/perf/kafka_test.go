package perf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// startKafka starts a private Apache Kafka broker (testenv.StartKafkaBroker:
// single-node KRaft, replication factor 1) for one configuration, with
// retention enforced every 5 s instead of every 5 min: a run writes
// 300–450 MB/s and would fill the disk between two checks (the topic has
// retention.bytes). It is stopped when the test ends; its log is kept in dir.
func startKafka(t *testing.T, dir string) broker {
	t.Helper()
	k := testenv.StartKafkaBroker(t, testenv.WithProperties(
		"log.retention.check.interval.ms=5000",
		"log.segment.delete.delay.ms=1000",
	))
	t.Cleanup(func() {
		k.Stop() // before testenv's cleanup, so that the log is complete
		if b, err := os.ReadFile(k.LogPath()); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "kafka.log"), b, 0o644)
		}
	})
	return broker{addr: k.Addr(), pid: k.Pid()}
}
