package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// txnState describes, for a failure report, what the broker knows of the
// transactions on topics: each partition's high watermark and last stable
// offset, the producers with an open transaction on it (the producer id and
// epoch that hold the LSO back), and every transactional id the
// coordinators know, with its state, producer id and epoch. It is what
// kafka-transactions.sh list / describe / describe-producers print.
func txnState(brokers []string, topics ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Sprintf("transaction state: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var b strings.Builder
	hw, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		fmt.Fprintf(&b, "list end offsets: %v\n", err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		fmt.Fprintf(&b, "list last stable offsets: %v\n", err)
	}
	hw.Each(func(o kadm.ListedOffset) {
		s, _ := lso.Lookup(o.Topic, o.Partition)
		fmt.Fprintf(&b, "partition %s/%d: high watermark %d, last stable offset %d\n", o.Topic, o.Partition, o.Offset, s.Offset)
	})
	s := kadm.TopicsSet{}
	s.MergeTopics(topics)
	prods, err := adm.DescribeProducers(ctx, s)
	if err != nil {
		fmt.Fprintf(&b, "describe producers: %v\n", err)
	}
	for _, p := range prods.SortedProducers() {
		open := ""
		if p.CurrentTxnStartOffset >= 0 {
			open = fmt.Sprintf(" OPEN TRANSACTION from offset %d", p.CurrentTxnStartOffset)
		}
		fmt.Fprintf(&b, "producer on %s/%d: id %d epoch %d last seq %d coordinator epoch %d last write %s%s\n",
			p.Topic, p.Partition, p.ProducerID, p.ProducerEpoch, p.LastSequence, p.CoordinatorEpoch,
			time.UnixMilli(p.LastTimestamp).UTC().Format("15:04:05.000"), open)
	}
	txns, err := adm.DescribeTransactions(ctx)
	if err != nil {
		fmt.Fprintf(&b, "describe transactions: %v\n", err)
	}
	for _, d := range txns.Sorted() {
		fmt.Fprintf(&b, "transactional id %s: state %s, producer id %d epoch %d, started %s, partitions %v, err %v\n",
			d.TxnID, d.State, d.ProducerID, d.ProducerEpoch, time.UnixMilli(d.StartTimestamp).UTC().Format("15:04:05.000"),
			d.Topics.Sorted(), d.Err)
	}
	return b.String()
}

// holdOnFailure keeps a failed run's services up for the duration in
// E2E_HOLD_ON_FAILURE (e.g. 10m), so the broker can be inspected with
// kafka-transactions.sh and its data directory copied before the test's
// cleanup removes it.
func holdOnFailure(failed bool, logf func(string, ...any)) {
	d, err := time.ParseDuration(os.Getenv("E2E_HOLD_ON_FAILURE"))
	if !failed || err != nil || d <= 0 {
		return
	}
	logf("E2E_HOLD_ON_FAILURE: holding the services for %s (pid %d)", d, os.Getpid())
	time.Sleep(d)
}

// brokerDir returns the directory of the private broker listening on
// addr (its server.properties, log4j2.properties, kafka.log and data/), found
// through the command line of its JVM; "" when there is none.
func brokerDir(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("kafka.Kafka")) {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i, a := range args {
			if a != "kafka.Kafka" || i+1 >= len(args) {
				continue
			}
			pb, err := os.ReadFile(args[i+1])
			if err == nil && bytes.Contains(pb, []byte("PLAINTEXT://127.0.0.1:"+port+"\n")) {
				return filepath.Dir(args[i+1])
			}
		}
	}
	return ""
}

// brokerLogLevel (diagnostics, E2E_BROKER_LOG=INFO) sets the root log
// level of the private broker at addr for its next start.
func brokerLogLevel(addr string) {
	lvl := os.Getenv("E2E_BROKER_LOG")
	dir := brokerDir(addr)
	if lvl == "" || dir == "" {
		return
	}
	conf := filepath.Join(dir, "log4j2.properties")
	b, err := os.ReadFile(conf)
	if err != nil {
		return
	}
	_ = os.WriteFile(conf, []byte(strings.Replace(string(b), "rootLogger.level = WARN", "rootLogger.level = "+lvl, 1)), 0o644)
}

// keepBroker copies the private broker's log (and, when the test failed,
// its data directory) into dir.
func keepBroker(addr, dir string, failed bool) {
	src := brokerDir(addr)
	if src == "" {
		return
	}
	args := []string{"-a", filepath.Join(src, "kafka.log")}
	if failed {
		args = append(args, filepath.Join(src, "data"))
	}
	// It runs from t.Cleanup, after t.Context() is done: its own bound.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = exec.CommandContext(ctx, "cp", append(args, dir)...).Run()
}
