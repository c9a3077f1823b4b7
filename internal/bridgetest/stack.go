package bridgetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// StartSim starts an Amp simulator with one network, cfg; it is closed when
// the test ends.
func StartSim(t testing.TB, cfg ampsim.NetworkConfig) *ampsim.Server {
	t.Helper()
	sim, err := ampsim.New(ampsim.Config{NetworkConfig: cfg})
	if err != nil {
		t.Fatalf("ampsim: %v", err)
	}
	if err := sim.Start(context.Background()); err != nil {
		t.Fatalf("starting ampsim: %v", err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// Stack is what one end-to-end run of the bridge talks to, and the file it
// runs with: the test sets the fields up to Stream, WriteConfig the next
// three; Apps is the test's to add to.
type Stack struct {
	// Sim is the Amp simulator the bridge reads.
	Sim *ampsim.Server
	// Brokers are the Kafka seed brokers.
	Brokers []string
	// Registry is the schema registry's URL.
	Registry string
	// Dir is the run's directory: WriteConfig writes bridge.yaml there.
	Dir string
	// Bin is the bridge binary (Build).
	Bin string
	// Stream is the id of the run's one stream.
	Stream string
	// AmpAddr is the Flight address the bridge is given (a proxy's, say);
	// "" means Sim.Addr().
	AmpAddr string

	// CfgPath is the bridge's YAML file.
	CfgPath string
	// Topic is the stream's data topic, <name>.transactions.
	Topic string
	// Control is the control topic, <name>.control.
	Control string
	// Apps are the ids of the Kafka Streams applications run against the
	// stack: DeleteTopics deletes their groups and internal topics.
	Apps []string
}

// Config is what a run sets in the bridge's YAML besides the settings
// every run has (WriteConfig). Kafka, Sections and Stream are YAML written
// as at the top level; WriteConfig indents them.
type Config struct {
	// Amp holds more settings of the amp section.
	Amp string
	// Name is the transactional id prefix and names the topics; it must be
	// unique on shared services (testenv.UniqueName).
	Name string
	// SQL is the stream's query.
	SQL string
	// Kafka holds more settings of the kafka section.
	Kafka string
	// Sections are the sections between registry and streams: checkpoint,
	// http, log.
	Sections string
	// Stream holds more settings of the stream: transaction, backfill, ...
	Stream string
}

// WriteConfig writes Dir/bridge.yaml: the simulator (or AmpAddr) as Amp (reconnecting
// within 50ms..1s), the brokers with the control topic <Name>.control and
// replication factor 1, the registry, and the stream s.Stream publishing
// c.SQL to <Name>.transactions in 2 partitions; with c's settings added. It
// sets CfgPath, Topic and Control.
func (s *Stack) WriteConfig(t testing.TB, c Config) {
	t.Helper()
	cfg := fmt.Sprintf(`amp:
  addr: %[1]s
  reconnect_min: 50ms
  reconnect_max: 1s
%[10]skafka:
  brokers: [%[2]s]
  transactional_id_prefix: %[3]s
  control_topic: %[3]s.control
  replication_factor: 1
%[4]sregistry:
  url: %[5]s
%[6]sstreams:
  - id: %[7]s
    sql: %[8]q
    topic: %[3]s.transactions
    partitions: 2
%[9]s`, cmp.Or(s.AmpAddr, s.Sim.Addr()), strings.Join(s.Brokers, ", "), c.Name, indent(c.Kafka, 2), s.Registry,
		indent(c.Sections, 0), s.Stream, c.SQL, indent(c.Stream, 4), indent(c.Amp, 2))
	s.Topic = c.Name + ".transactions"
	s.Control = c.Name + ".control"
	s.CfgPath = filepath.Join(s.Dir, "bridge.yaml")
	if err := os.WriteFile(s.CfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatalf("writing the bridge's config: %v", err)
	}
}

// indent returns the lines of yaml, each indented by n spaces and ended by
// a newline ("" for none).
func indent(yaml string, n int) string {
	var b strings.Builder
	for line := range strings.Lines(strings.TrimSpace(yaml)) {
		if strings.TrimSpace(line) != "" {
			b.WriteString(strings.Repeat(" ", n))
		}
		b.WriteString(strings.TrimRight(line, "\n"))
		b.WriteString("\n")
	}
	return b.String()
}

// WaitCaughtUp waits until the newest committed watermark of the stream
// (CommittedPoint, asked every poll) is the simulator's head, number and
// hash, and returns the head. It fails when the bridge exits or ctx ends
// first, with the tail of the bridge's log.
func (s *Stack) WaitCaughtUp(ctx context.Context, p *Proc, poll time.Duration) (uint64, error) {
	head, ok := s.Sim.Head()
	if !ok {
		return 0, errors.New("the simulator has no blocks")
	}
	want, _ := s.Sim.BlockHash(head)
	var last reorg.Point
	var lastErr error
	for {
		if p.Exited() {
			return 0, fmt.Errorf("bridge exited while catching up (%w); log tail:\n%s", errOr(p.Err(), "exit status 0"), p.Tail(40))
		}
		pt, ok, err := CommittedPoint(ctx, s.Brokers, s.Control, s.Stream, ampsim.DefaultNetwork)
		if err == nil && ok {
			last = pt
			if pt.Number == head && pt.Hash == want {
				return head, nil
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("bridge did not commit the head %d (newest watermark %d, read error %w): %w; log tail:\n%s",
				head, last.Number, errOr(lastErr, "none"), ctx.Err(), p.Tail(40))
		case <-time.After(poll):
		}
	}
}

// CommittedPoint returns the cursor point on network of the newest
// committed watermark of stream in controlTopic (ok false when there is
// none yet).
func CommittedPoint(ctx context.Context, brokers []string, controlTopic, stream, network string) (pt reorg.Point, ok bool, err error) {
	kc := sink.DefaultConfig()
	kc.Brokers = brokers
	r, err := sink.NewReader(ctx, kc, sink.Deps{})
	if err != nil {
		return reorg.Point{}, false, err
	}
	defer r.Close()
	read, err := r.ReadControl(ctx, controlTopic, -1)
	if err != nil {
		return reorg.Point{}, false, err
	}
	codec, err := offsets.NewControlCodec()
	if err != nil {
		return reorg.Point{}, false, err
	}
	for _, rec := range read.Records {
		if string(rec.Key) != stream || rec.Value == nil {
			continue
		}
		ev, err := codec.Decode(rec.Value)
		if err != nil {
			return reorg.Point{}, false, fmt.Errorf("decoding control record %d: %w", rec.Offset, err)
		}
		if ev.Watermark == nil {
			continue
		}
		if p, found := ev.Watermark.Cursor[network]; found {
			pt, ok = p, true
		}
	}
	return pt, ok, nil
}

// errOr returns err, or an error reading none when err is nil, so that a
// message can wrap an error that may be absent without printing %!w(<nil>).
func errOr(err error, none string) error {
	if err == nil {
		return errors.New(none)
	}
	return err
}
