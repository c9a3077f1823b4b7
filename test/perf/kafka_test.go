package perf

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

var flagBrokerLogDir = flag.String("perf.broker-log-dir", "auto",
	"parent of the Apache Kafka broker's log directory; auto: /dev/shm when it is a writable directory, so that the kernel's "+
		"writeback of the broker's files (130-260 MB/s of it in a run) does not take CPU from the contenders on the same cores, "+
		"else on disk beside the broker's other files (as with an empty value)")

// brokerLogDir resolves -perf.broker-log-dir: "" for the disk, else the
// directory (auto: /dev/shm if this machine has it writable, probed once
// a broker starts, not when the test binary does).
var brokerLogDir = sync.OnceValue(func() string {
	if *flagBrokerLogDir != "auto" {
		return *flagBrokerLogDir
	}
	const shm = "/dev/shm"
	if st, err := os.Stat(shm); err != nil || !st.IsDir() {
		return ""
	}
	f, err := os.CreateTemp(shm, "perf-probe-")
	if err != nil {
		return ""
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return shm
})

// startKafka starts a private Apache Kafka broker (testenv.StartKafkaBroker:
// single-node KRaft, replication factor 1) for one configuration, with
// retention enforced every 5 s instead of every 5 min: a run writes
// 300–450 MB/s and would fill the disk between two checks (the topic has
// retention.bytes). Its log directory is under -perf.broker-log-dir
// (tmpfs by default; topicConfig keeps each topic to 512 MiB, and the
// peers' topics are deleted after their runs). It is stopped when the test
// ends; its log is kept in dir.
func startKafka(t *testing.T, dir string) broker {
	t.Helper()
	props := []string{
		"log.retention.check.interval.ms=5000",
		"log.segment.delete.delay.ms=1000",
	}
	if dir := brokerLogDir(); dir != "" {
		data, err := os.MkdirTemp(dir, "perf-kafka-")
		if err != nil {
			t.Fatalf("creating the broker's log directory under -perf.broker-log-dir %s: %v (pass -perf.broker-log-dir '' for the disk)", dir, err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(data) }) // after the broker's stop below
		props = append(props, "log.dirs="+data)
	}
	k := testenv.StartKafkaBroker(t, testenv.WithProperties(props...))
	t.Cleanup(func() {
		k.Stop() // before testenv's cleanup, so that the log is complete
		if b, err := os.ReadFile(k.LogPath()); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "kafka.log"), b, 0o644)
		}
	})
	return broker{addr: k.Addr(), pid: k.Pid()}
}

// topicConfig is the configuration of a topic the benchmarks write to on
// Apache Kafka: deleted beyond 512 MiB in all (retention.bytes is per
// partition), in segments of a quarter of that, so that a run's topics fit
// in memory on tmpfs and what the kernel writes back stays small.
func topicConfig(partitions int) map[string]*string {
	retention := max(64<<20, (512<<20)/max(partitions, 1))
	return map[string]*string{
		"cleanup.policy":  new("delete"),
		"retention.bytes": new(strconv.Itoa(retention)),
		"segment.bytes":   new(strconv.Itoa(max(16<<20, retention/4))),
	}
}

// kafkaBrokerName names the Apache Kafka broker of startKafka in reports.
func kafkaBrokerName() string {
	where := "log on disk"
	if dir := brokerLogDir(); dir != "" {
		where = "log under " + dir
	}
	return "Apache Kafka " + kafkaVersion() + " (single KRaft broker, testenv, " + where + ")"
}
