package ampsim

import (
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		errContains string
	}{
		{"zero value", Config{}, ""},
		{"negative blocks", Config{NetworkConfig: NetworkConfig{InitialBlocks: -1}}, "InitialBlocks"},
		{"extra network without id", Config{ExtraNetworks: []NetworkConfig{{Dataset: "x"}}}, "needs a Network id"},
		{"duplicate network", Config{ExtraNetworks: []NetworkConfig{{Network: "mainnet", Dataset: "x"}}}, "configured twice"},
		{"bad dataset", Config{NetworkConfig: NetworkConfig{Dataset: "a.b"}}, "must not contain"},
		{"unknown policy", Config{KeepAlive: 7}, "policy"},
		{"negative interval", Config{KeepAliveInterval: -time.Second}, "KeepAliveInterval"},
		{"unknown unsynced table", Config{UnsyncedTables: []string{"receipts"}}, "names no table"},
		{"sub-second block time", Config{NetworkConfig: NetworkConfig{BlockTime: time.Millisecond}}, "BlockTime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if tt.errContains == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.errContains)
		})
	}
}

func TestKeepAlivePolicyParse(t *testing.T) {
	for _, p := range []KeepAlivePolicy{KeepAlivePerMicrobatch, KeepAlivePeriodicFromStart, KeepAliveOff} {
		got, err := ParseKeepAlivePolicy(p.String())
		require.NoError(t, err)
		assert.Equal(t, p, got)
	}
	_, err := ParseKeepAlivePolicy("sometimes")
	require.ErrorContains(t, err, "per-microbatch")
}

func TestChainDeterministicAndForks(t *testing.T) {
	a, err := New(smallConfig(5))
	require.NoError(t, err)
	b, err := New(smallConfig(5))
	require.NoError(t, err)
	for n := range uint64(5) {
		ha, _ := a.BlockHash(n)
		hb, _ := b.BlockHash(n)
		assert.Equal(t, ha, hb, "block %d is deterministic", n)
	}
	old, _ := a.BlockHash(4)
	require.NoError(t, a.Reorg(2, 3))
	head, _ := a.Head()
	assert.Equal(t, uint64(5), head)
	fork, ok := a.Primary().BlockByHash(old)
	require.True(t, ok, "replaced blocks stay stored")
	assert.Equal(t, uint64(4), fork.Number)
	blk, _ := a.Primary().Block(3)
	p, _ := a.BlockHash(2)
	assert.Equal(t, p, blk.Parent)
	assert.NotEqual(t, old, hashOfChain(a, 4))
	require.ErrorIs(t, a.Reorg(0, 1), ErrInvalidReorg)
	require.ErrorIs(t, a.Reorg(7, 1), ErrInvalidReorg)
	_, err = a.Chain("base")
	require.ErrorIs(t, err, ErrUnknownNetwork)
}

func hashOfChain(s *Server, n uint64) reorg.Hash {
	h, _ := s.BlockHash(n)
	return h
}

func TestScriptedStream(t *testing.T) {
	s := startServer(t, smallConfig(1))
	c := dial(t, s)
	ctx := testCtx(t)
	r1 := reorg.BlockRange{Network: "mainnet", Start: 0, End: 10, Hash: reorg.Hash{1}, HasPrevHash: true}
	r2 := reorg.BlockRange{Network: "mainnet", Start: 12, End: 20, Hash: reorg.Hash{2}, PrevHash: reorg.Hash{1}, HasPrevHash: true}
	s.EnqueueScript(Script{
		Batches: []ScriptedBatch{
			{Ranges: []reorg.BlockRange{r1}, Rows: 7},
			{Ranges: []reorg.BlockRange{r1}, Complete: true, Rows: 2}, // complete with rows
			{Ranges: []reorg.BlockRange{r2, r2}},                      // gap + duplicate network
			{AppMetadata: []byte(`{"ranges":[]}`)},                    // missing ranges_complete
		},
		Status: status.Error(codes.Unavailable, "scripted end"),
	})
	info, err := c.info(ctx, `SELECT tx_hash, block_num FROM eth_rpc.transactions SETTINGS stream = true`)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	rdr, err := flight.NewRecordReader(st.tap)
	require.NoError(t, err)
	defer rdr.Release()
	var rows []int
	var metas []string
	for rdr.Next() {
		rows = append(rows, int(rdr.RecordBatch().NumRows()))
		metas = append(metas, string(rdr.LatestAppMetadata()))
	}
	requireCode(t, rdr.Err(), codes.Unavailable, "scripted end")
	assert.Equal(t, []int{7, 2, 0, 0}, rows)
	assert.Contains(t, metas[1], `"ranges_complete":true`)
	assert.Contains(t, metas[2], `"start":12`)
	assert.Equal(t, `{"ranges":[]}`, metas[3])

	// The queue is consumed: the next DoGet follows the chain again.
	st2, err := c.doGet(ctx, info)
	require.NoError(t, err)
	mb := st2.readMicrobatches(1)[0]
	assert.Equal(t, uint64(0), mb.r.Start)
}

func TestFaultDisconnectAndDelay(t *testing.T) {
	s := startServer(t, smallConfig(3))
	c := dial(t, s)
	ctx := testCtx(t)
	s.InjectFault(Fault{AfterBatches: 1, Disconnect: true})
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	_, err = st.readAll()
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err), "a cut connection: %v", err)

	s.InjectFault(Fault{AfterBatches: 1, Delay: 150 * time.Millisecond})
	info, err = c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err = c.doGet(ctx, info)
	require.NoError(t, err)
	start := time.Now()
	st.readMicrobatches(1)
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
}

func TestDropConnections(t *testing.T) {
	s := startServer(t, smallConfig(1))
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	st.readMicrobatches(1)
	s.DropConnections()
	_, err = st.next()
	require.Error(t, err)
	assert.NotErrorIs(t, err, io.EOF)
}

func TestKeepAlivePolicies(t *testing.T) {
	t.Run("periodic from start while idle", func(t *testing.T) {
		cfg := smallConfig(1)
		cfg.KeepAlive = KeepAlivePeriodicFromStart
		s := startServer(t, cfg)
		c := dial(t, s)
		ctx := testCtx(t)
		info, err := c.info(ctx, streamTx)
		require.NoError(t, err)
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		mb := st.readMicrobatches(1)[0]
		for range 3 {
			b, err := st.next()
			require.NoError(t, err)
			assert.Zero(t, b.rows)
			assert.False(t, b.complete)
			assert.Equal(t, []reorg.BlockRange{mb.r}, b.ranges, "idle keep-alives repeat the last range")
		}
	})
	t.Run("off", func(t *testing.T) {
		cfg := smallConfig(1)
		cfg.KeepAlive = KeepAliveOff
		cfg.MicrobatchDelay = 100 * time.Millisecond
		s := startServer(t, cfg)
		c := dial(t, s)
		ctx := testCtx(t)
		info, err := c.info(ctx, streamTx)
		require.NoError(t, err)
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		mb := st.readMicrobatches(1)[0]
		for _, b := range mb.batches[:len(mb.batches)-1] {
			assert.Positive(t, b.rows, "no keep-alives")
		}
	})
}

func TestDictionaryStrings(t *testing.T) {
	cfg := smallConfig(3)
	cfg.DictionaryStrings = true
	s := startServer(t, cfg)
	c := dial(t, s)
	rows, recs, sc := batchQuery(t, c, `SELECT _block_num, value FROM eth_rpc.transactions`)
	assert.Equal(t, arrow.DICTIONARY, sc.Field(1).Type.ID())
	require.NotEmpty(t, recs)
	assert.Positive(t, rows)
	assert.Equal(t, arrow.DICTIONARY, recs[0].Column(1).DataType().ID())
	sawDict := false
	for _, r := range recs {
		sawDict = sawDict || r.Column(1).Len() > 0
	}
	assert.True(t, sawDict)
}

func TestBlockTimerAndReorgs(t *testing.T) {
	cfg := smallConfig(1)
	cfg.BlockInterval = 10 * time.Millisecond
	cfg.ReorgEvery = 3
	s := startServer(t, cfg)
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	mbs := st.readMicrobatches(8)
	reorgs := 0
	for i := 1; i < len(mbs); i++ {
		if mbs[i].r.Start <= mbs[i-1].r.End {
			reorgs++
			assert.NotEqual(t, mbs[i-1].r.Hash, mbs[i].r.PrevHash)
		} else {
			assert.Equal(t, mbs[i-1].r.End+1, mbs[i].r.Start)
			assert.Equal(t, mbs[i-1].r.Hash, mbs[i].r.PrevHash)
		}
	}
	assert.Positive(t, reorgs, "the timer reorgs every 3rd tick")
}

func TestRequestHook(t *testing.T) {
	var mu sync.Mutex
	var seen []RequestInfo
	cfg := smallConfig(2)
	cfg.OnRequest = func(ri RequestInfo) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ri)
	}
	s := startServer(t, cfg)
	c := dial(t, s)
	ctx := testCtx(t)
	cur, err := s.Primary().Cursor(0)
	require.NoError(t, err)
	hdr, err := cur.Header()
	require.NoError(t, err)
	info, err := c.info(ctx, txSQL, "amp-stream", "true", "amp-resume", hdr, "authorization", "Bearer tok")
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	st.readMicrobatches(1)
	reqs := s.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, "GetFlightInfo", reqs[0].Method)
	assert.Equal(t, []string{"true"}, reqs[0].Header.Get("amp-stream"))
	assert.Equal(t, []string{"Bearer tok"}, reqs[0].Header.Get("authorization"))
	assert.Equal(t, hdr, reqs[0].Cursor)
	assert.True(t, reqs[0].Streaming)
	assert.Equal(t, "DoGet", reqs[1].Method)
	assert.Empty(t, reqs[1].Header.Get("amp-resume"), "headers are read on GetFlightInfo only")
	assert.Equal(t, hdr, reqs[1].Cursor, "the cursor travels in the ticket")
	mu.Lock()
	assert.Len(t, seen, 2)
	mu.Unlock()
}

func TestCloseStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	cfg := smallConfig(1)
	cfg.BlockInterval = 5 * time.Millisecond
	s, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	require.ErrorIs(t, s.Start(t.Context()), ErrStarted)
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	st.readMicrobatches(2)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "idempotent")
	_, err = st.readAll()
	require.Error(t, err, "open streams end on Close")
	require.ErrorIs(t, s.Start(t.Context()), ErrClosed)
	st.close()
	require.NoError(t, c.c.Close())
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+2 }, 5*time.Second, 20*time.Millisecond,
		"goroutines: before %d, now %d", before, runtime.NumGoroutine())
}

func TestScriptedDelayAndHang(t *testing.T) {
	s := startServer(t, Config{})
	c := dial(t, s)
	ctx := testCtx(t)
	r := reorg.BlockRange{Network: "mainnet", Start: 0, End: 0, Hash: reorg.Hash{1}, HasPrevHash: true}
	s.EnqueueScript(Script{Batches: []ScriptedBatch{
		{Ranges: []reorg.BlockRange{r}, Rows: 1},
		{Ranges: []reorg.BlockRange{r}, Complete: true, Delay: 100 * time.Millisecond},
	}, Hang: true})
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err, "scripts need no synced data")
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	start := time.Now()
	mb := st.readMicrobatches(1)[0]
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	assert.Equal(t, 1, mb.rows)
	st.expectSilence(100 * time.Millisecond)
}
