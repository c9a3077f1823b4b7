package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/labels"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// tokenCSV writes a token-metadata CSV (address, symbol, decimals) for
// every other contract of the simulator's pool of 300 log addresses (the
// simulator derives them as sha256("contract"+k)[:20]), so about half the
// logs have a label. Addresses alternate between lower and upper case.
func tokenCSV(t *testing.T) string {
	t.Helper()
	var sb strings.Builder
	sb.WriteString("address,symbol,decimals\n")
	for k := 0; k < 300; k += 2 {
		sum := sha256.Sum256([]byte(fmt.Sprint("contract", k)))
		a := "0x" + hex.EncodeToString(sum[:20])
		if k%4 == 0 {
			a = "0X" + strings.ToUpper(a[2:])
		}
		fmt.Fprintf(&sb, "%s,TOKEN-%d,%d\n", a, k, k%19)
	}
	p := filepath.Join(t.TempDir(), "tokens.csv")
	require.NoError(t, os.WriteFile(p, []byte(sb.String()), 0o600))
	return p
}

// scenarioLabels streams the simulator's logs with a token CSV joined on
// the log's address, through a reorg, and checks with bridge verify (which
// joins the CSV onto Amp's rows with its own code) that the topic holds
// exactly Amp's rows with their labels: for an inner join the rows without
// a label are not published, for a left join they are, with null labels;
// the retractions carry the labelled rows as they were published.
func scenarioLabels(t *testing.T, svc services) {
	for _, join := range []labels.Join{labels.Inner, labels.Left} {
		t.Run(string(join), func(t *testing.T) {
			h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 30, LogsPerTx: 2},
				MaxMicrobatchBlocks: 4}, 128)
			s := &h.cfg.Streams[0]
			s.SQL = "SELECT * FROM eth_rpc.logs SETTINGS stream = true"
			s.Labels = []config.LabelConfig{{File: tokenCSV(t), Key: "address", Join: join, Types: map[string]string{"decimals": "int64"}}}
			h.cfg.Defaults()
			require.NoError(t, h.cfg.Validate())

			stop, b := h.runBridge()
			h.waitHead()
			h.sim.Mine(2)
			h.waitHead()
			require.NoError(t, h.sim.Reorg(3, 4))
			h.waitHead()
			polled := gaugeValue(t, b.reg, "amp_bridge_records_polled_total", s.ID)
			dropped := counterValue(t, b.reg, "amp_bridge_label_misses_total", s.ID, "dropped")
			nulls := counterValue(t, b.reg, "amp_bridge_label_misses_total", s.ID, "null")
			require.NoError(t, stop())

			rep := h.verify()
			requireClean(t, rep)
			assert.Positive(t, rep.Retracted, "the reorg retracted labelled rows")
			h.mu.Lock()
			committed := h.rows
			h.mu.Unlock()
			if join == labels.Inner {
				assert.Less(t, float64(committed), 0.8*polled, "an inner join publishes only the logs of labelled tokens")
				assert.Positive(t, dropped, "amp_bridge_label_misses_total counts the dropped rows")
				assert.Zero(t, nulls)
			} else {
				assert.InDelta(t, polled, float64(committed), 0.2*polled, "a left join publishes every log")
				assert.Positive(t, nulls, "amp_bridge_label_misses_total counts the rows with null labels")
				assert.Zero(t, dropped)
			}
		})
	}
}

func TestRunLabels(t *testing.T) {
	t.Parallel()
	scenarioLabels(t, fakeServices(t))
}

// TestSchemaShowsLabelColumns: bridge schema prints the label columns in
// the value schema, nullable for a left join only.
func TestSchemaShowsLabelColumns(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 2}}, 128)
	csv := tokenCSV(t)
	for _, join := range []string{"inner", "left"} {
		path := filepath.Join(t.TempDir(), "bridge.yaml")
		require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`
amp:
  addr: %s
kafka:
  brokers: [127.0.0.1:1]
checkpoint:
  redis:
    addr: 127.0.0.1:1
streams:
  - id: logs
    sql: SELECT * FROM eth_rpc.logs
    envelope: flat
    labels:
      - file: %s
        key: address
        join: %s
        columns: [symbol]
`, h.sim.Addr(), csv, join)), 0o600))
		var out, errOut logBuffer
		code := run(t.Context(), []string{"schema", "-c", path}, &out, &errOut)
		require.Equal(t, 0, code, errOut.String())
		if join == "inner" {
			assert.Contains(t, out.String(), `"name": "symbol",`+"\n"+`      "type": "string"`)
		} else {
			assert.Contains(t, out.String(), `"name": "symbol",`+"\n"+`      "type": [`+"\n"+`        "null",`)
		}
	}
}

// TestRunLabelFileChanges: a label file whose rows change between runs is
// a data change: the stream goes on, rows published before keep their old
// labels (verify, which reads the file as it is now, shows them as
// differences), later rows carry the new ones, and a reorg's retractions of
// rows published before the change carry the old labels, as published; a
// file whose columns change is a schema change, decided at start like a
// changed SQL (schema_evolution).
func TestRunLabelFileChanges(t *testing.T) {
	t.Parallel()
	svc := fakeServices(t)
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 10, LogsPerTx: 2}, MaxMicrobatchBlocks: 1}, 128)
	s := &h.cfg.Streams[0]
	s.SQL = "SELECT * FROM eth_rpc.logs SETTINGS stream = true"
	csv := tokenCSV(t)
	s.Labels = []config.LabelConfig{{File: csv, Key: "address", Join: labels.Left, Columns: []string{"symbol"}}}
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	requireClean(t, h.verify())

	// New symbols, same columns: the stream goes on.
	body, err := os.ReadFile(csv)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(csv, []byte(strings.ReplaceAll(string(body), ",TOKEN-", ",RENAMED-")), 0o600))
	stop = h.run()
	h.sim.Mine(3)
	h.waitHead()
	// A reorg deeper than the blocks mined since the change retracts rows
	// published with the old file and with the new one.
	require.NoError(t, h.sim.Reorg(6, 7))
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	assert.Positive(t, rep.Retracted)
	assert.Positive(t, rep.Matching, "rows published after the change carry the new labels")
	assert.Positive(t, rep.Missing, "rows published before the change keep their old labels")
	assert.Equal(t, rep.Missing, rep.Extra, "each old row differs by its label only")

	// The retractions are the rows read back from Kafka: the old labels.
	oldRetracted, newRetracted := 0, 0
	for _, rec := range readTopic(t, svc.brokers, s.Topic) {
		if string(header(rec, "amp-op")) != "d" {
			continue
		}
		switch {
		case bytes.Contains(rec.Value, []byte("TOKEN-")):
			oldRetracted++
		case bytes.Contains(rec.Value, []byte("RENAMED-")):
			newRetracted++
		}
	}
	assert.Positive(t, oldRetracted, "retractions of rows published before the change carry the old labels")
	assert.Positive(t, newRetracted, "retractions of rows published after it carry the new ones")

	// Another column: a schema change, refused at start under
	// schema_evolution none; under backward (the default) a left join's
	// column, nullable, is a compatible change and the stream goes on.
	s.Labels[0].Columns = []string{"symbol", "decimals"}
	s.SchemaEvolution = config.EvolutionNone
	err = h.runOnce(t)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fingerprint")
	s.SchemaEvolution = config.EvolutionBackward
	stop = h.run()
	h.sim.Mine(1)
	h.waitHead()
	require.NoError(t, stop())
}

// readTopic reads every committed record of topic.
func readTopic(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	for quiet := 0; quiet < 3; {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { n++; out = append(out, r) })
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return out
}

func header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// scenarioLabelsBackfill: a stream with an inner label join backfills its
// history in parallel partitions, hands over and goes on live: both the
// backfilled rows (op r) and the live ones (op c) are joined (amp-python
// ignores label_config while streaming), as bridge verify's own join of
// the CSV onto Amp's rows shows.
func scenarioLabelsBackfill(t *testing.T, svc services) {
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 80, LogsPerTx: 2}, MaxMicrobatchBlocks: 8}, 64)
	s := &h.cfg.Streams[0]
	s.SQL = "SELECT * FROM eth_rpc.logs SETTINGS stream = true"
	s.Labels = []config.LabelConfig{{File: tokenCSV(t), Key: "address", Types: map[string]string{"decimals": "int64"}}}
	s.Backfill = config.BackfillConfig{Enabled: true, Workers: 2, PartitionSize: 30, StepBlocks: 10, HandoverMargin: 10}
	h.cfg.Defaults()
	require.NoError(t, h.cfg.Validate())
	stop := h.run()
	h.waitHead()
	h.sim.Mine(3)
	h.waitHead()
	require.NoError(t, stop())
	requireClean(t, h.verify())
	counts, _, _ := h.topicOps()
	assert.Positive(t, counts["r"], "backfilled rows")
	assert.Positive(t, counts["c"], "live rows")
}

func TestRunLabelsBackfill(t *testing.T) {
	t.Parallel()
	scenarioLabelsBackfill(t, fakeServices(t))
}

// counterValue is the value of counter name{stream, outcome}.
func counterValue(t *testing.T, reg prometheus.Gatherer, name, stream, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["stream"] == stream && got["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	require.Failf(t, "metric not gathered", "%s{stream=%q, outcome=%q}", name, stream, outcome)
	return 0
}

// TestRunRefusesLabelsTheQueryCannotJoin: a label key that is no column of
// the query's result, or an address cell of the wrong width for it, stops
// the stream at start with a permanent error that names the key, the file
// and the line.
func TestRunRefusesLabelsTheQueryCannotJoin(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short.csv")
	require.NoError(t, os.WriteFile(short, []byte("address,symbol\n0x0102,A\n"), 0o600))
	for _, tt := range []struct {
		name        string
		label       config.LabelConfig
		errContains []string
	}{
		{"no such column", config.LabelConfig{File: tokenCSV(t), Key: "token", CSVKey: "address"},
			[]string{".labels[0]", `key "token"`, "has no column", "address"}},
		{"an address of the wrong width", config.LabelConfig{File: short, Key: "address"},
			[]string{".labels[0]", "short.csv line 2", `column "address"`, "40 hex digits (20 bytes)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 2, LogsPerTx: 1}}, 128)
			s := &h.cfg.Streams[0]
			s.SQL = "SELECT * FROM eth_rpc.logs SETTINGS stream = true"
			s.Labels = []config.LabelConfig{tt.label}
			h.cfg.Defaults()
			require.NoError(t, h.cfg.Validate(), "the file itself is well-formed: only the query's schema can refuse it")
			err := h.runOnce(t)
			require.Error(t, err)
			assert.True(t, pipeline.Permanent(err), "permanent: %v", err)
			for _, want := range tt.errContains {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}
