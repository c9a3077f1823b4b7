package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// The queries of the schema evolution scenarios: the stream starts with
// sqlV1; sqlV2 gains a nullable column (chain_id), a BACKWARD and FULL
// compatible change; sqlNonNull gains a non-nullable one (nonce), which no
// registered version can be read with; sqlDropped drops a non-nullable
// column (value), BACKWARD compatible but not FULL.
const (
	sqlV1      = "SELECT _block_num, block_num, tx_index, tx_hash, value FROM eth_rpc.transactions SETTINGS stream = true"
	sqlV2      = "SELECT _block_num, block_num, tx_index, tx_hash, value, chain_id FROM eth_rpc.transactions SETTINGS stream = true"
	sqlNonNull = "SELECT _block_num, block_num, tx_index, tx_hash, value, chain_id, nonce FROM eth_rpc.transactions SETTINGS stream = true"
	sqlDropped = "SELECT _block_num, block_num, tx_index, tx_hash FROM eth_rpc.transactions SETTINGS stream = true"
)

// topicRecord is what the evolution scenarios read back of a data record.
type topicRecord struct {
	op       string
	lo, hi   uint64 // its batch's block range
	schemaID int    // 0 for a tombstone
	tomb     bool
	value    []byte // nil for a tombstone
}

// readTopic reads topic read_committed from the start.
func (h *harness) readTopic(topic string) []topicRecord {
	h.t.Helper()
	var out []topicRecord
	for _, r := range readTopic(h.t, h.svc.brokers, topic) {
		var tr topicRecord
		for _, hd := range r.Headers {
			switch hd.Key {
			case encode.HeaderOp:
				tr.op = string(hd.Value)
			case encode.HeaderRange:
				a, b, _ := strings.Cut(string(hd.Value), "-")
				tr.lo, _ = strconv.ParseUint(a, 10, 64)
				tr.hi, _ = strconv.ParseUint(b, 10, 64)
			}
		}
		tr.tomb, tr.value = r.Value == nil, r.Value
		if r.Value != nil {
			f, _, err := encode.ParseHeader(r.Value)
			require.NoError(h.t, err)
			tr.schemaID, _ = f.ID()
		}
		out = append(out, tr)
	}
	return out
}

// valueIDs returns the ids of the registered versions of topic's value
// subject, oldest first.
func (h *harness) valueIDs(topic string) []int {
	h.t.Helper()
	cl, err := sr.NewClient(sr.URLs(h.svc.registry))
	require.NoError(h.t, err)
	ss, err := cl.Schemas(h.t.Context(), encode.ValueSubject(topic))
	require.NoError(h.t, err)
	var ids []int
	for _, s := range ss {
		ids = append(ids, s.ID)
	}
	return ids
}

// checkpoint loads the stream's checkpoint from the store.
func (h *harness) checkpoint(id string) offsets.Checkpoint {
	h.t.Helper()
	b, err := newBridge(h.t.Context(), h.cfg, testLogger())
	require.NoError(h.t, err)
	defer b.close()
	cp, err := b.store.Load(h.t.Context(), id)
	require.NoError(h.t, err)
	return cp
}

// runToError runs the bridge until it stops on its own and returns why.
func (h *harness) runToError() error {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 60*time.Second)
	defer cancel()
	b, err := newBridge(ctx, h.cfg, testLogger())
	require.NoError(h.t, err)
	defer b.close()
	return b.run(ctx)
}

func newEvolveHarness(t *testing.T, svc services) *harness {
	t.Helper()
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 6}}, 128)
	h.cfg.Streams[0].SQL = sqlV1
	require.NoError(t, h.cfg.Validate())
	return h
}

// TestRunSchemaEvolution: a stream runs, its SQL gains a nullable column,
// the bridge restarts and goes on on the same topic from its checkpoint
// under a new version of the value subject; a reorg then retracts batches
// from both sides of the change, each retraction in the schema its row was
// written with; verify compares both schemas' rows with Amp.
func TestRunSchemaEvolution(t *testing.T) {
	t.Parallel()
	scenarioSchemaEvolution(t, fakeServices(t))
}

func scenarioSchemaEvolution(t *testing.T, svc services) {
	h := newEvolveHarness(t, svc)
	sc := &h.cfg.Streams[0]
	stop := h.run()
	h.waitHead()
	for range 3 {
		h.sim.Mine(1)
		h.waitHead()
	}
	require.NoError(t, stop())
	changeAt, _ := h.sim.Head() // the last block published with sqlV1
	changeAt++

	sc.SQL = sqlV2
	stop = h.run()
	for range 3 {
		h.sim.Mine(1)
		h.waitHead()
	}
	require.NoError(t, stop())

	ids := h.valueIDs(sc.Topic)
	require.Len(t, ids, 2, "a second version of the value subject")
	oldID, newID := ids[0], ids[1]
	cp := h.checkpoint(sc.ID)
	seen := map[int]bool{}
	for _, b := range cp.Batches {
		seen[b.SchemaID] = true
		if len(b.Spans) > 0 && b.Ranges[0].Start >= changeAt {
			assert.Equal(t, newID, b.SchemaID, "batch %s after the change", b.ID)
		} else if len(b.Spans) > 0 {
			assert.Equal(t, oldID, b.SchemaID, "batch %s before the change", b.ID)
		}
	}
	assert.True(t, seen[oldID] && seen[newID], "the checkpoint records both schema ids: %v", seen)

	// A reorg replacing the last 5 blocks: 2 published with sqlV1, 3 with sqlV2.
	require.NoError(t, h.sim.Reorg(5, 6))
	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())

	retracted := map[int]int{}
	for _, r := range h.readTopic(sc.Topic) {
		if r.op == "d" && !r.tomb {
			retracted[r.schemaID]++
			if r.lo < changeAt {
				assert.Equal(t, oldID, r.schemaID, "a row published before the change is retracted in its own schema")
			} else {
				assert.Equal(t, newID, r.schemaID, "a row published after the change is retracted in the new schema")
			}
		}
	}
	assert.Positive(t, retracted[oldID], "retractions of rows written before the change")
	assert.Positive(t, retracted[newID], "retractions of rows written after the change")
	rep := h.verify()
	requireClean(t, rep)
	assert.Positive(t, rep.Retracted)
}

// TestRunSchemaEvolutionRefused: an incompatible change is refused at
// start naming the subject, both schemas, the rule and the two ways
// forward, and publishes nothing; each way forward then works.
func TestRunSchemaEvolutionRefused(t *testing.T) {
	t.Parallel()
	scenarioSchemaEvolutionRefused(t, fakeServices(t))
}

func scenarioSchemaEvolutionRefused(t *testing.T, svc services) {
	h := newEvolveHarness(t, svc)
	sc := &h.cfg.Streams[0]
	stop := h.run()
	h.waitHead()
	h.sim.Mine(2)
	h.waitHead()
	require.NoError(t, stop())
	before := len(h.readTopic(sc.Topic))
	next, _ := h.sim.Head()
	next++

	sc.SQL = sqlNonNull
	err := h.runToError()
	require.ErrorIs(t, err, encode.ErrIncompatible)
	var sce *pipeline.SchemaChangeError
	require.ErrorAs(t, err, &sce)
	assert.True(t, pipeline.Permanent(err))
	msg := err.Error()
	for _, want := range []string{
		`subject "` + encode.ValueSubject(sc.Topic) + `"`, `field "before.nonce"`, "field added without a default",
		"the rule that fails: BACKWARD (transitive)", "registered schema: {", "new schema: {", `"name":"nonce"`,
		"a new stream id with its own topic", "bridge rewind -c bridge.yaml -stream " + sc.ID + " -to-block " + strconv.FormatUint(next, 10),
		"streams[].topic to a new topic",
	} {
		assert.Contains(t, msg, want)
	}
	assert.Len(t, h.readTopic(sc.Topic), before, "nothing published")
	assert.Len(t, h.valueIDs(sc.Topic), 1, "nothing registered")

	// Way forward 1: the changed query under a new stream id and topic.
	id, topic := sc.ID, sc.Topic
	sc.ID, sc.Topic = id+"-v2", topic+".v2"
	stop = h.run()
	h.waitStreamHead(sc.ID)
	require.NoError(t, stop())
	requireClean(t, h.verify())
	sc.ID, sc.Topic = id, topic

	// Way forward 2: rewind, then a new topic.
	{
		oldTopic := sc.Topic
		sc.SQL = sqlV1 // rewind with the SQL the rows were published with
		b, err := newBridge(t.Context(), h.cfg, testLogger())
		require.NoError(t, err)
		res, err := b.rewind(t.Context(), sc.ID, next-1)
		b.close()
		require.NoError(t, err)
		assert.Positive(t, res.Rows)
		resume := res.Cursor[h.sim.Primary().Network()].Number + 1 // the first block the new topic holds

		sc.SQL, sc.Topic = sqlNonNull, oldTopic+".moved"
		stop := h.run()
		h.sim.Mine(2)
		h.waitStreamHead(sc.ID)
		require.NoError(t, stop())
		head, _ := h.sim.Head()
		var newLo, newHi uint64 = 1 << 62, 0
		for _, r := range h.readTopic(sc.Topic) {
			if r.op == "c" {
				newLo, newHi = min(newLo, r.lo), max(newHi, r.hi)
			}
		}
		assert.Equal(t, resume, newLo, "the new topic starts where the rewind resumed")
		assert.Equal(t, head, newHi)

		// A reorg reaching below the switch: the old topic's rows are
		// retracted in the old topic, in their own schema, and their
		// replacements go to the new topic.
		require.NoError(t, h.sim.Reorg(6, 7))
		stop = h.run()
		h.waitStreamHead(sc.ID)
		require.NoError(t, stop())
		oldIDs := h.valueIDs(oldTopic)
		oldRetracted := 0
		for _, r := range h.readTopic(oldTopic) {
			if r.op == "d" && !r.tomb && r.lo < resume {
				oldRetracted++
				assert.Equal(t, oldIDs[0], r.schemaID)
			}
		}
		assert.Positive(t, oldRetracted, "the reorg retracted old rows in the old topic")
	}
}

// waitStreamHead waits until stream id committed the simulator's head.
func (h *harness) waitStreamHead(id string) {
	h.t.Helper()
	head, ok := h.sim.Head()
	require.True(h.t, ok)
	require.Eventually(h.t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.lastOf[id] >= head
	}, 60*time.Second, 10*time.Millisecond, "stream %s did not commit head block %d", id, head)
}

// TestRunSchemaEvolutionModes: none refuses any change as before, full
// refuses a change only BACKWARD accepts, and without a registry a change
// is refused naming registry.url.
func TestRunSchemaEvolutionModes(t *testing.T) {
	start := func(t *testing.T, svc services) *harness {
		h := newEvolveHarness(t, svc)
		stop := h.run()
		h.waitHead()
		require.NoError(t, stop())
		return h
	}
	t.Run("none", func(t *testing.T) {
		h := start(t, fakeServices(t))
		h.cfg.Streams[0].SQL, h.cfg.Streams[0].SchemaEvolution = sqlV2, config.EvolutionNone
		err := h.runToError()
		require.ErrorIs(t, err, offsets.ErrFingerprintChanged)
		assert.Len(t, h.valueIDs(h.cfg.Streams[0].Topic), 1)
	})
	t.Run("full", func(t *testing.T) {
		h := start(t, fakeServices(t))
		sc := &h.cfg.Streams[0]
		sc.SQL, sc.SchemaEvolution = sqlDropped, config.EvolutionFull
		err := h.runToError()
		require.ErrorIs(t, err, encode.ErrIncompatible)
		assert.ErrorContains(t, err, "the rule that fails: FULL (transitive)")
		assert.ErrorContains(t, err, `field "before.value": `+encode.ErrIncompatible.Error()+`: the registered version cannot read the new schema's data: field dropped`)
		// The same change under backward goes on.
		sc.SchemaEvolution = config.EvolutionBackward
		stop := h.run()
		h.sim.Mine(1)
		h.waitHead()
		require.NoError(t, stop())
		requireClean(t, h.verify())
	})
	t.Run("no registry", func(t *testing.T) {
		svc := fakeServices(t)
		svc.registry = ""
		h := newEvolveHarness(t, svc)
		h.cfg.Registry.URL = ""
		stop := h.run()
		h.waitHead()
		require.NoError(t, stop())
		h.cfg.Streams[0].SQL = sqlV2
		err := h.runToError()
		require.ErrorIs(t, err, offsets.ErrFingerprintChanged)
		assert.ErrorContains(t, err, "schema evolution needs a schema registry (registry.url)")
	})
}

// TestRunSchemaEvolutionDatasetVersion: Amp's dataset gains a column that
// SELECT * then returns: at a restart, and under the running stream (seen
// on a reconnect, it restarts the stream, which registers the new
// version); the stream goes on on the same topic and verify is clean.
func TestRunSchemaEvolutionDatasetVersion(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 4},
		HiddenColumns: []string{"blocks.blob_gas_used", "blocks.requests_hash"}}, 128)
	sc := &h.cfg.Streams[0]
	sc.SQL = "SELECT * FROM eth_rpc.blocks SETTINGS stream = true"
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())

	// At a restart.
	require.NoError(t, h.sim.SetHiddenColumns([]string{"blocks.requests_hash"}))
	h.sim.Mine(2)
	stop = h.run()
	h.waitHead()
	assert.Len(t, h.valueIDs(sc.Topic), 2)

	// Under the running stream.
	require.NoError(t, h.sim.SetHiddenColumns(nil))
	h.sim.DropConnections()
	h.sim.Mine(2)
	h.waitHead()
	require.NoError(t, stop())
	assert.Len(t, h.valueIDs(sc.Topic), 3)
	assert.Positive(t, h.count("commit"))
	requireClean(t, h.verify())
}
