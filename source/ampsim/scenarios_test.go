package ampsim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

const (
	txSQL     = `SELECT * FROM eth_rpc.transactions`
	blocksSQL = `SELECT block_num, hash FROM eth_rpc.blocks`
	streamTx  = txSQL + ` SETTINGS stream = true`
)

func requireCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "a gRPC status: %v", err)
	assert.Equal(t, code, st.Code(), "status %v", err)
	assert.Contains(t, st.Message(), contains)
}

// fullRange is the synced range 0..=head of the primary chain.
func fullRange(t *testing.T, s *Server) reorg.BlockRange {
	head, ok := s.Head()
	require.True(t, ok)
	r, err := s.Primary().Range(s.Primary().FirstBlock(), head)
	require.NoError(t, err)
	return r
}

func TestA01_BatchQueryWithRows(t *testing.T) {
	s := startServer(t, smallConfig(3))
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, txSQL)
	require.NoError(t, err)
	require.Len(t, info.Endpoint, 1)
	assert.EqualValues(t, -1, info.TotalRecords)
	sc, err := flight.DeserializeSchema(info.Schema, c.mem)
	require.NoError(t, err)
	assert.True(t, sc.Equal(transactionsSchema()), "FlightInfo schema is Amp's transactions schema")

	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	bs, err := st.readAll()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(bs), 2)
	assert.Equal(t, ipc.MessageSchema, st.tap.msgs[0].typ, "schema first")
	r := fullRange(t, s)
	want, err := s.Primary().ExpectedRows("transactions", 0, 2)
	require.NoError(t, err)
	rows := 0
	for i, b := range bs {
		assert.Equal(t, []reorg.BlockRange{r}, b.ranges)
		assert.Equal(t, i == len(bs)-1, b.complete, "only the last batch completes")
		rows += b.rows
	}
	assert.Zero(t, bs[len(bs)-1].rows)
	assert.Equal(t, want, rows)
	assert.Positive(t, rows)
	assert.Equal(t, uint64(0), r.Start)
	assert.Equal(t, uint64(2), r.End)
	assert.True(t, r.PrevHash.IsZero(), "genesis prev_hash is zero")
}

func TestA02_BatchQueryNoRows(t *testing.T) {
	s := startServer(t, smallConfig(3))
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, txSQL+` WHERE block_num > 1000`)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	bs, err := st.readAll()
	require.NoError(t, err)
	require.Len(t, bs, 2)
	r := fullRange(t, s)
	assert.Equal(t, batchSummary{0, []reorg.BlockRange{r}, false}, summarize(bs[0]))
	assert.Equal(t, batchSummary{0, []reorg.BlockRange{r}, true}, summarize(bs[1]), "the range is the synced range, not the rows' range")
}

type batchSummary struct {
	rows     int
	ranges   []reorg.BlockRange
	complete bool
}

func summarize(b batch) batchSummary { return batchSummary{b.rows, b.ranges, b.complete} }

func TestA03_BatchQueryTableNotSynced(t *testing.T) {
	cfg := smallConfig(3)
	cfg.UnsyncedTables = []string{"logs"}
	s := startServer(t, cfg)
	c := dial(t, s)
	ctx := testCtx(t)
	for _, sql := range []string{`SELECT * FROM eth_rpc.logs`, `SELECT * FROM eth_rpc.blocks`} {
		info, err := c.info(ctx, sql)
		require.NoError(t, err)
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		bs, err := st.readAll()
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(bs), 2)
		last := bs[len(bs)-1]
		assert.True(t, last.complete)
		if strings.Contains(sql, "logs") {
			assert.Equal(t, `{"ranges":[],"ranges_complete":true}`, string(last.raw))
			assert.Equal(t, `{"ranges":[],"ranges_complete":false}`, string(bs[0].raw))
		} else {
			assert.Len(t, last.ranges, 1, "a synced table keeps its range")
		}
	}
}

func TestA04_StreamFirstMicrobatch(t *testing.T) {
	s := startServer(t, smallConfig(3))
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	mbs := st.readMicrobatches(1)
	assert.Equal(t, ipc.MessageSchema, st.tap.msgs[0].typ, "schema first")
	mb := mbs[0]
	assert.Equal(t, fullRange(t, s), mb.r)
	assert.Zero(t, mb.batches[0].rows, "per-microbatch policy: a keep-alive opens the microbatch")
	assert.False(t, mb.batches[0].complete)
	want, err := s.Primary().ExpectedRows("transactions", 0, 2)
	require.NoError(t, err)
	assert.Equal(t, want, mb.rows)
	st.expectSilence(150 * time.Millisecond) // no EOS, no messages
}

func TestA05_MultiBatchRange(t *testing.T) {
	// Amp cuts a batch at a block only where it continues the previous
	// batch's last block (MessageStreamWithBlockComplete): with 7-row
	// DataFusion batches over blocks of ~4 rows, batches hold several
	// blocks and some are cut once. Generated and replayed rows alike.
	for _, replay := range []int{0, 3} {
		t.Run(fmt.Sprintf("block_num selected, replay %d", replay), func(t *testing.T) {
			cfg := smallConfig(40)
			cfg.BatchRows = 7
			cfg.ReplayBlocks = replay
			s := startServer(t, cfg)
			c := dial(t, s)
			ctx := testCtx(t)
			info, err := c.info(ctx, `SELECT _block_num, tx_hash FROM eth_rpc.transactions SETTINGS stream = true`, "amp-stream", "true")
			require.NoError(t, err)
			st, err := c.doGet(ctx, info)
			require.NoError(t, err)
			st.keep = true
			mb := st.readMicrobatches(1)[0]
			var blocks [][]uint64 // per data batch, its rows' _block_num
			var all []uint64
			for _, b := range mb.batches {
				if b.rows > 0 {
					assert.Equal(t, string(mb.batches[0].raw), string(b.raw), "byte-identical app_metadata")
					v := b.rec.Column(0).(*array.Uint64).Values()
					blocks = append(blocks, slices.Clone(v))
					all = append(all, v...)
				}
			}
			want, err := s.Primary().ExpectedRows("transactions", 0, 39)
			require.NoError(t, err)
			require.Len(t, all, want)
			// Amp's rule applied to 7-row batches of all the rows.
			var exp []int
			var last uint64
			cut := 0
			for off := 0; off < len(all); off += 7 {
				in := all[off:min(off+7, len(all))]
				k := 0
				if off > 0 && in[0] == last && in[len(in)-1] > last {
					for in[k] == last {
						k++
					}
					exp = append(exp, k)
					cut++
				}
				exp = append(exp, len(in)-k)
				last = in[len(in)-1]
			}
			got := make([]int, len(blocks))
			multi := 0
			for i, b := range blocks {
				got[i] = len(b)
				if b[0] != b[len(b)-1] {
					multi++
				}
			}
			assert.Equal(t, exp, got, "data batch rows: 7-row batches, cut as Amp cuts them")
			assert.Positive(t, multi, "some batches hold several blocks")
			assert.Positive(t, cut, "some batches are cut at a block")
		})
	}
	t.Run("over 2 MiB", func(t *testing.T) {
		cfg := smallConfig(1)
		cfg.TxPerBlock = 6000
		s := startServer(t, cfg)
		c := dial(t, s)
		ctx := testCtx(t)
		info, err := c.info(ctx, txSQL)
		require.NoError(t, err)
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		bs, err := st.readAll()
		require.NoError(t, err)
		data := 0
		for _, b := range bs {
			if b.rows > 0 {
				data++
				assert.Equal(t, string(bs[0].raw), string(b.raw))
			}
		}
		assert.GreaterOrEqual(t, data, 2, "a batch over 2 MiB is split")
		for _, m := range st.tap.msgs {
			assert.LessOrEqual(t, m.bodySize, 2<<20+256<<10, "zero-copy slices serialize to about 2 MiB")
		}
	})
}

func TestA06_CatchUpCappedMicrobatches(t *testing.T) {
	cfg := smallConfig(2501)
	cfg.TxPerBlock = -1
	s := startServer(t, cfg)
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, blocksSQL+` SETTINGS stream = true`)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	mbs := st.readMicrobatches(3)
	want := [][2]uint64{{0, 999}, {1000, 1999}, {2000, 2500}}
	for i, mb := range mbs {
		got := [2]uint64{mb.r.Start, mb.r.End}
		assert.Equal(t, want[i], got)
		assert.Equal(t, int(mb.r.End-mb.r.Start+1), mb.rows)
		assert.Equal(t, hashOf(t, s, mb.r.End), mb.r.Hash)
		if i > 0 {
			assert.Equal(t, mbs[i-1].r.Hash, mb.r.PrevHash, "prev_hash = previous hash")
		}
	}
}

func TestA07_IdleAndKeepAlive(t *testing.T) {
	t.Run("idle chain sends nothing", func(t *testing.T) {
		s := startServer(t, smallConfig(1))
		c := dial(t, s)
		ctx := testCtx(t)
		info, err := c.info(ctx, streamTx)
		require.NoError(t, err)
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		st.readMicrobatches(1)
		st.expectSilence(200 * time.Millisecond)
	})
	t.Run("long microbatch sends keep-alives", func(t *testing.T) {
		cfg := smallConfig(1)
		cfg.MicrobatchDelay = 200 * time.Millisecond
		s := startServer(t, cfg)
		c := dial(t, s)
		ctx := testCtx(t)
		info, err := c.info(ctx, streamTx)
		require.NoError(t, err)
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		mb := st.readMicrobatches(1)[0]
		keepAlives := 0
		for _, b := range mb.batches[:len(mb.batches)-1] {
			if b.rows == 0 {
				keepAlives++
				assert.False(t, b.complete)
			}
		}
		assert.GreaterOrEqual(t, keepAlives, 3, "immediate tick plus one every 20ms during 200ms")
	})
}

func TestA08_ResumeCanonicalCursor(t *testing.T) {
	s := startServer(t, smallConfig(4))
	c := dial(t, s)
	ctx := testCtx(t)
	cur, err := s.Primary().Cursor(1)
	require.NoError(t, err)
	hdr, err := cur.Header()
	require.NoError(t, err)
	info, err := c.info(ctx, streamTx, "amp-resume", hdr)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	mb := st.readMicrobatches(1)[0]
	assert.Equal(t, uint64(2), mb.r.Start)
	assert.Equal(t, uint64(3), mb.r.End)
	assert.Equal(t, hashOf(t, s, 1), mb.r.PrevHash)
}

func TestA09_ResumeNonCanonicalCursor(t *testing.T) {
	s := startServer(t, smallConfig(3))
	c := dial(t, s)
	ctx := testCtx(t)
	old2 := hashOf(t, s, 2)
	require.NoError(t, s.Reorg(2, 3)) // replaces 1 and 2, adds 3
	hdr := fmt.Sprintf(`{"mainnet":{"number":2,"hash":"%s"}}`, old2)
	info, err := c.info(ctx, `SELECT _block_num, hash FROM eth_rpc.blocks SETTINGS stream = true`, "amp-resume", hdr)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	st.keep = true
	mb := st.readMicrobatches(1)[0]
	assert.Equal(t, [2]uint64{1, 3}, [2]uint64{mb.r.Start, mb.r.End})
	assert.Equal(t, hashOf(t, s, 0), mb.r.PrevHash)
	assert.Equal(t, 3, mb.rows, "rows 1', 2', 3")
	for _, b := range mb.batches {
		if b.rows == 1 {
			num := b.rec.Column(0).(*array.Uint64).Value(0)
			h := b.rec.Column(1).(*array.FixedSizeBinary).Value(0)
			want := hashOf(t, s, num)
			assert.Equal(t, want[:], h, "row of block %d is the new fork's", num)
		}
	}
}

func TestA10_ResumeUnknownHash(t *testing.T) {
	s := startServer(t, smallConfig(5))
	c := dial(t, s)
	ctx := testCtx(t)
	hdr := `{"mainnet":{"number":3,"hash":"0x` + strings.Repeat("ab", 32) + `"}}`
	info, err := c.info(ctx, streamTx, "amp-resume", hdr)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	mb := st.readMicrobatches(1)[0]
	assert.Equal(t, uint64(3), mb.r.Start, "the cursor block itself is re-sent")
	assert.Equal(t, hashOf(t, s, 2), mb.r.PrevHash)
}

func TestA11_ResumeCursorWithoutNetwork(t *testing.T) {
	s := startServer(t, smallConfig(2))
	c := dial(t, s)
	ctx := testCtx(t)
	for _, hdr := range []string{`{}`, `{"base":{"number":1,"hash":"0x` + strings.Repeat("00", 32) + `"}}`} {
		info, err := c.info(ctx, streamTx, "amp-resume", hdr)
		require.NoError(t, err, "GetFlightInfo does not check the cursor")
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		_, err = st.next()
		requireCode(t, err, codes.Internal, "failed to convert cursor -> expected cursor for network 'mainnet'")
	}
}

func TestA12_ResumeInvalidJSONIgnored(t *testing.T) {
	s := startServer(t, smallConfig(3))
	c := dial(t, s)
	ctx := testCtx(t)
	for _, hdr := range []string{"not-json", `{"mainnet":{"number":1}}`, `{"mainnet":{"number":1,"hash":"xyz"}}`} {
		info, err := c.info(ctx, streamTx, "amp-resume", hdr)
		require.NoError(t, err)
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		mb := st.readMicrobatches(1)[0]
		assert.Equal(t, uint64(0), mb.r.Start, "cursor %q ignored: start at the earliest block", hdr)
		st.close()
	}
}

func TestA13_StreamingModeSwitch(t *testing.T) {
	s := startServer(t, smallConfig(2))
	c := dial(t, s)
	tests := []struct {
		name   string
		sql    string
		header []string
		stream bool
	}{
		{"header TRUE", txSQL, []string{"amp-stream", "TRUE"}, true},
		{"header 1", txSQL, []string{"amp-stream", "1"}, true},
		{"header false beats SETTINGS", streamTx, []string{"amp-stream", "false"}, false},
		{"header 0 beats SETTINGS", streamTx, []string{"amp-stream", "0"}, false},
		{"header yes ignored, SQL streams", streamTx, []string{"amp-stream", "yes"}, true},
		{"empty header ignored, SQL batch", txSQL, []string{"amp-stream", ""}, false},
		{"SETTINGS stream = 1 is batch", txSQL + ` SETTINGS stream = 1`, nil, false},
		{"SETTINGS Stream = TRUE streams", txSQL + ` SETTINGS Stream = TRUE`, nil, true},
		{"SETTINGS stream = 'true' is batch", txSQL + ` SETTINGS stream = 'true'`, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			info, err := c.info(ctx, tt.sql, tt.header...)
			require.NoError(t, err)
			st, err := c.doGet(ctx, info)
			require.NoError(t, err)
			if !tt.stream {
				_, err := st.readAll()
				require.NoError(t, err, "a batch query ends with EOS")
				return
			}
			st.readMicrobatches(1)
			st.expectSilence(100 * time.Millisecond)
		})
	}
}

func TestA14_InStreamReorgDepth1(t *testing.T) {
	s := startServer(t, smallConfig(1))
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	var got [][2]uint64
	mbs := st.readMicrobatches(1)
	for range 2 {
		s.Mine(1)
		mbs = append(mbs, st.readMicrobatches(1)...)
	}
	old2 := hashOf(t, s, 2)
	require.NoError(t, s.Reorg(1, 2))
	mbs = append(mbs, st.readMicrobatches(1)...)
	for _, mb := range mbs {
		got = append(got, [2]uint64{mb.r.Start, mb.r.End})
	}
	assert.Equal(t, [][2]uint64{{0, 0}, {1, 1}, {2, 2}, {2, 3}}, got)
	assert.Equal(t, hashOf(t, s, 1), mbs[3].r.PrevHash)
	assert.NotEqual(t, old2, mbs[3].r.PrevHash)
	assert.Equal(t, old2, mbs[2].r.Hash)
}

func TestA15_InStreamReorgInsideMultiBlockMicrobatch(t *testing.T) {
	s := startServer(t, smallConfig(1))
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	mbs := st.readMicrobatches(1)
	s.Mine(2)
	mbs = append(mbs, st.readMicrobatches(1)...)
	require.NoError(t, s.Reorg(1, 2))
	mbs = append(mbs, st.readMicrobatches(1)...)
	var got [][2]uint64
	for _, mb := range mbs {
		got = append(got, [2]uint64{mb.r.Start, mb.r.End})
	}
	assert.Equal(t, [][2]uint64{{0, 0}, {1, 2}, {2, 3}}, got)
	assert.Equal(t, hashOf(t, s, 1), mbs[2].r.PrevHash)
}

func TestA16_DeepReorg(t *testing.T) {
	s := startServer(t, smallConfig(7))
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	mbs := st.readMicrobatches(1)
	assert.Equal(t, [2]uint64{0, 6}, [2]uint64{mbs[0].r.Start, mbs[0].r.End})
	require.NoError(t, s.Reorg(5, 7)) // depth 5 + 2 new blocks
	mb := st.readMicrobatches(1)[0]
	assert.Equal(t, [2]uint64{2, 8}, [2]uint64{mb.r.Start, mb.r.End})
	assert.Equal(t, hashOf(t, s, 1), mb.r.PrevHash)
	want, err := s.Primary().ExpectedRows("transactions", 2, 8)
	require.NoError(t, err)
	assert.Equal(t, want, mb.rows)
}

func TestA17_StreamingNoSyncedData(t *testing.T) {
	for _, cfg := range []Config{smallConfig(0), {UnsyncedTables: []string{"transactions"}, NetworkConfig: NetworkConfig{InitialBlocks: 3}}} {
		s := startServer(t, cfg)
		c := dial(t, s)
		ctx := testCtx(t)
		info, err := c.info(ctx, streamTx)
		require.NoError(t, err)
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		bs, err := st.readAll()
		require.NoError(t, err, "the empty stream ends with EOS")
		require.Len(t, bs, 1)
		assert.Equal(t, `{"ranges":[],"ranges_complete":true}`, string(bs[0].raw))
		assert.Zero(t, bs[0].rows)
		assert.Equal(t, ipc.MessageSchema, st.tap.msgs[0].typ)
	}
}

func TestA18_NonIncrementalStreamingSQL(t *testing.T) {
	s := startServer(t, smallConfig(3))
	c := dial(t, s)
	for _, sql := range []string{
		`SELECT COUNT(*) FROM eth_rpc.transactions`,
		`SELECT DISTINCT "from" FROM eth_rpc.transactions`,
		`SELECT tx_hash FROM eth_rpc.transactions LIMIT 5`,
		`SELECT tx_hash, block_num FROM eth_rpc.transactions ORDER BY block_num DESC`,
		`SELECT max(gas_used) FROM eth_rpc.transactions`,
	} {
		t.Run(sql, func(t *testing.T) {
			ctx := testCtx(t)
			info, err := c.info(ctx, sql+` SETTINGS stream = true`)
			require.NoError(t, err, "GetFlightInfo plans without checking incrementality")
			st, err := c.doGet(ctx, info)
			require.NoError(t, err)
			_, err = st.next()
			requireCode(t, err, codes.InvalidArgument, "invalid query: non-incremental queries are not supported for streaming")
		})
	}
	t.Run("batch COUNT and LIMIT run", func(t *testing.T) {
		ctx := testCtx(t)
		want, err := s.Primary().ExpectedRows("transactions", 0, 2)
		require.NoError(t, err)
		info, err := c.info(ctx, `SELECT COUNT(*) FROM eth_rpc.transactions`)
		require.NoError(t, err)
		st, err := c.doGet(ctx, info)
		require.NoError(t, err)
		st.keep = true
		bs, err := st.readAll()
		require.NoError(t, err)
		require.Len(t, bs, 2)
		assert.Equal(t, fmt.Sprint(want), bs[0].rec.Column(0).ValueStr(0))
		info, err = c.info(ctx, `SELECT tx_hash FROM eth_rpc.transactions LIMIT 3`)
		require.NoError(t, err)
		st, err = c.doGet(ctx, info)
		require.NoError(t, err)
		bs, err = st.readAll()
		require.NoError(t, err)
		rows := 0
		for _, b := range bs {
			rows += b.rows
		}
		assert.Equal(t, 3, rows)
	})
	t.Run("batch ORDER BY is refused by name", func(t *testing.T) {
		_, err := c.info(testCtx(t), `SELECT tx_hash FROM eth_rpc.transactions ORDER BY tx_hash`)
		requireCode(t, err, codes.InvalidArgument, "ORDER BY")
	})
}

func TestA19_MultiNetworkBatch(t *testing.T) {
	cfg := smallConfig(3)
	cfg.ExtraNetworks = []NetworkConfig{{Network: "base", Dataset: "base_rpc", InitialBlocks: 5, FirstBlock: 100, TxPerBlock: 2, BlockTime: 2 * time.Second}}
	s := startServer(t, cfg)
	c := dial(t, s)
	ctx := testCtx(t)
	sql := `SELECT block_num, hash FROM eth_rpc.blocks UNION ALL SELECT block_num, hash FROM "edgeandnode/base_rpc".blocks`
	info, err := c.info(ctx, sql)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	bs, err := st.readAll()
	require.NoError(t, err)
	last := bs[len(bs)-1]
	require.True(t, last.complete)
	require.Len(t, last.ranges, 2)
	assert.Equal(t, "mainnet", last.ranges[0].Network)
	assert.Equal(t, "base", last.ranges[1].Network)
	assert.Equal(t, [2]uint64{100, 104}, [2]uint64{last.ranges[1].Start, last.ranges[1].End})
	assert.False(t, last.ranges[1].PrevHash.IsZero(), "not genesis: prev_hash is the parent's")
	rows := 0
	for _, b := range bs {
		rows += b.rows
	}
	assert.Equal(t, 8, rows)

	info, err = c.info(ctx, sql+` SETTINGS stream = true`)
	require.NoError(t, err)
	st, err = c.doGet(ctx, info)
	require.NoError(t, err)
	_, err = st.next()
	requireCode(t, err, codes.Internal, "streaming query execution error")
}

func TestA20_BadDescriptors(t *testing.T) {
	s := startServer(t, smallConfig(1))
	c := dial(t, s)
	ctx := testCtx(t)
	otherAny := cmdDescriptor(t, "x")
	otherAny.Cmd = mustAny(t, "type.googleapis.com/arrow.flight.protocol.sql.CommandGetTables")
	tests := []struct {
		name     string
		desc     *flight.FlightDescriptor
		contains string
	}{
		{"raw SQL bytes", &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte("SELECT * FROM eth_rpc.blocks")}, ""},
		{"PATH", &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"eth_rpc", "blocks"}}, "unsupported flight descriptor type"},
		{"other Any", otherAny, "unsupported flight descriptor command: type.googleapis.com/arrow.flight.protocol.sql.CommandGetTables"},
		{"empty SQL", cmdDescriptor(t, "  "), "invalid query"},
		{"bad SQL", cmdDescriptor(t, "SELEC 1"), "only SELECT"},
		{"unknown table", cmdDescriptor(t, "SELECT * FROM eth_rpc.nope"), `table "nope" not found`},
		{"unqualified table", cmdDescriptor(t, "SELECT * FROM blocks"), "write it as dataset.table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.c.GetFlightInfo(ctx, tt.desc)
			requireCode(t, err, codes.InvalidArgument, tt.contains)
		})
	}
	t.Run("bad ticket", func(t *testing.T) {
		st, err := c.c.DoGet(ctx, &flight.Ticket{Ticket: []byte("\x00garbage")})
		require.NoError(t, err)
		_, err = st.Recv()
		requireCode(t, err, codes.InvalidArgument, "ticket decoding error")
	})
	t.Run("other RPCs", func(t *testing.T) {
		_, err := c.c.GetSchema(ctx, cmdDescriptor(t, txSQL))
		requireCode(t, err, codes.Unimplemented, "")
		_, err = c.c.PollFlightInfo(ctx, cmdDescriptor(t, txSQL))
		requireCode(t, err, codes.Unimplemented, "")
		lf, err := c.c.ListFlights(ctx, &flight.Criteria{})
		require.NoError(t, err)
		_, err = lf.Recv()
		requireCode(t, err, codes.Unimplemented, "")
		la, err := c.c.ListActions(ctx, &flight.Empty{})
		require.NoError(t, err)
		_, err = la.Recv()
		requireCode(t, err, codes.Unimplemented, "")
	})
}

func TestA21_MidStreamFailureAndResume(t *testing.T) {
	s := startServer(t, smallConfig(1))
	c := dial(t, s)
	ctx := testCtx(t)
	s.InjectFault(Fault{AfterBatches: 5, Status: status.Error(codes.Internal, "streaming query execution error | Caused by: injected")})
	info, err := c.info(ctx, streamTx)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	var last reorg.BlockRange
	var failure error
	for i := 0; failure == nil; i++ {
		b, err := st.next()
		if err != nil {
			failure = err
			break
		}
		if b.complete {
			last = b.ranges[0]
			s.Mine(1)
		}
	}
	requireCode(t, failure, codes.Internal, "injected")
	require.Equal(t, 5, countBatches(st.tap.msgs), "the fault fired after 5 batches")
	hdr, err := reorg.CursorFromRanges([]reorg.BlockRange{last}).Header()
	require.NoError(t, err)
	info, err = c.info(ctx, streamTx, "amp-resume", hdr)
	require.NoError(t, err)
	st2, err := c.doGet(ctx, info)
	require.NoError(t, err)
	mb := st2.readMicrobatches(1)[0]
	assert.Equal(t, last.End+1, mb.r.Start, "resumed after the last completed range")
	assert.Equal(t, last.Hash, mb.r.PrevHash)
}

func countBatches(msgs []wireMsg) int {
	n := 0
	for _, m := range msgs {
		if m.typ == ipc.MessageRecordBatch {
			n++
		}
	}
	return n
}

func mustAny(t *testing.T, typeURL string) []byte {
	t.Helper()
	// Any{type_url, value}: field 1 (string), field 2 (bytes, empty).
	b := []byte{0x0a, byte(len(typeURL))}
	return append(b, typeURL...)
}
