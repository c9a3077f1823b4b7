package ampsim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"github.com/apache/arrow-go/v18/arrow/array"
	"math/big"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Table names served in every dataset.
const (
	TableBlocks       = "blocks"
	TableTransactions = "transactions"
	TableLogs         = "logs"
)

// row is one table row: one value per schema column, in the Go forms
// appendValue accepts (uint64, uint32, int32, int64, bool, string, []byte,
// decimal128.Num, arrow.Timestamp, []any for lists and structs, nil for null).
type row []any

type table struct {
	name   string
	schema *arrow.Schema
	gen    func(sy *synth, cfg NetworkConfig, b *Block, out sink)
	count  func(cfg NetworkConfig, b *Block) int
}

func (t *table) rowCount(cfg NetworkConfig, b *Block) int { return t.count(cfg, b) }

func f(name string, dt arrow.DataType, nullable bool) arrow.Field {
	return arrow.Field{Name: name, Type: dt, Nullable: nullable}
}

func listOf(dt arrow.DataType) *arrow.ListType {
	return arrow.ListOfField(arrow.Field{Name: "item", Type: dt, Nullable: false})
}

// Arrow types of Amp's EVM tables (amp-protocol.md §4.2).
func hashType() arrow.DataType    { return &arrow.FixedSizeBinaryType{ByteWidth: 32} }
func addressType() arrow.DataType { return &arrow.FixedSizeBinaryType{ByteWidth: 20} }
func currencyType() arrow.DataType {
	return &arrow.Decimal128Type{Precision: 38, Scale: 0}
}
func timeType() arrow.DataType {
	return &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "+00:00"}
}

func blocksSchema() *arrow.Schema {
	typeHash, typeAddress, typeCurrency, typeTime := hashType(), addressType(), currencyType(), timeType()
	return arrow.NewSchema([]arrow.Field{
		f("_block_num", arrow.PrimitiveTypes.Uint64, false),
		f("block_num", arrow.PrimitiveTypes.Uint64, false),
		f("timestamp", typeTime, false),
		f("hash", typeHash, false),
		f("parent_hash", typeHash, false),
		f("ommers_hash", typeHash, false),
		f("miner", typeAddress, false),
		f("state_root", typeHash, false),
		f("transactions_root", typeHash, false),
		f("receipt_root", typeHash, false),
		f("logs_bloom", arrow.BinaryTypes.Binary, false),
		f("difficulty", typeCurrency, false),
		f("total_difficulty", typeCurrency, true),
		f("gas_limit", arrow.PrimitiveTypes.Uint64, false),
		f("gas_used", arrow.PrimitiveTypes.Uint64, false),
		f("extra_data", arrow.BinaryTypes.Binary, false),
		f("mix_hash", typeHash, false),
		f("nonce", arrow.PrimitiveTypes.Uint64, false),
		f("base_fee_per_gas", typeCurrency, true),
		f("withdrawals_root", typeHash, true),
		f("blob_gas_used", arrow.PrimitiveTypes.Uint64, true),
		f("excess_blob_gas", arrow.PrimitiveTypes.Uint64, true),
		f("parent_beacon_root", typeHash, true),
		f("requests_hash", typeHash, true),
	}, nil)
}

func transactionsSchema() *arrow.Schema {
	typeHash, typeAddress, typeCurrency, typeTime := hashType(), addressType(), currencyType(), timeType()
	accessListItem := arrow.StructOf(
		f("address", typeAddress, false),
		f("storage_keys", listOf(typeHash), false),
	)
	authorizationItem := arrow.StructOf(
		f("chain_id", arrow.PrimitiveTypes.Uint64, false),
		f("address", typeAddress, false),
		f("nonce", arrow.PrimitiveTypes.Uint64, false),
		f("y_parity", arrow.FixedWidthTypes.Boolean, false),
		f("r", typeHash, false),
		f("s", typeHash, false),
	)

	return arrow.NewSchema([]arrow.Field{
		f("_block_num", arrow.PrimitiveTypes.Uint64, false),
		f("block_hash", typeHash, false),
		f("block_num", arrow.PrimitiveTypes.Uint64, false),
		f("timestamp", typeTime, false),
		f("tx_index", arrow.PrimitiveTypes.Uint32, false),
		f("tx_hash", typeHash, false),
		f("to", typeAddress, true),
		f("nonce", arrow.PrimitiveTypes.Uint64, false),
		f("gas_price", typeCurrency, true),
		f("gas_limit", arrow.PrimitiveTypes.Uint64, false),
		f("value", arrow.BinaryTypes.String, false),
		f("input", arrow.BinaryTypes.Binary, false),
		f("r", typeHash, false),
		f("s", typeHash, false),
		f("v_parity", arrow.FixedWidthTypes.Boolean, false),
		f("chain_id", arrow.PrimitiveTypes.Uint64, true),
		f("gas_used", arrow.PrimitiveTypes.Uint64, false),
		f("type", arrow.PrimitiveTypes.Int32, false),
		f("max_fee_per_gas", typeCurrency, true),
		f("max_priority_fee_per_gas", typeCurrency, true),
		f("max_fee_per_blob_gas", typeCurrency, true),
		f("from", typeAddress, false),
		f("status", arrow.FixedWidthTypes.Boolean, false),
		f("state_root", typeHash, true),
		f("access_list", listOf(accessListItem), true),
		f("blob_versioned_hashes", listOf(typeHash), true),
		f("authorization_list", listOf(authorizationItem), true),
	}, nil)
}

func logsSchema() *arrow.Schema {
	typeHash, typeAddress, typeTime := hashType(), addressType(), timeType()
	return arrow.NewSchema([]arrow.Field{
		f("_block_num", arrow.PrimitiveTypes.Uint64, false),
		f("block_hash", typeHash, false),
		f("block_num", arrow.PrimitiveTypes.Uint64, false),
		f("timestamp", typeTime, false),
		f("tx_hash", typeHash, false),
		f("tx_index", arrow.PrimitiveTypes.Uint32, false),
		f("log_index", arrow.PrimitiveTypes.Uint32, false),
		f("address", typeAddress, false),
		f("topic0", typeHash, true),
		f("topic1", typeHash, true),
		f("topic2", typeHash, true),
		f("topic3", typeHash, true),
		f("data", arrow.BinaryTypes.Binary, false),
	}, nil)
}

// tableDef returns the definition of a table, nil if unknown.
func tableDef(name string) *table {
	switch name {
	case TableBlocks:
		return &table{name: name, schema: blocksSchema(), gen: genBlocks,
			count: func(NetworkConfig, *Block) int { return 1 }}
	case TableTransactions:
		return &table{name: name, schema: transactionsSchema(), gen: genTransactions, count: txCount}
	case TableLogs:
		return &table{name: name, schema: logsSchema(), gen: genLogs, count: logCount}
	default:
		return nil
	}
}

// rng is splitmix64, seeded from a block hash and a salt: deterministic and
// cheap. Its random byte strings are cut from a shared arena.
type rng struct {
	s  uint64
	ar *arena
}

func newRNG(h [32]byte, salt uint64) *rng {
	return &rng{s: binary.BigEndian.Uint64(h[:8]) ^ binary.BigEndian.Uint64(h[8:16]) ^ (salt+1)*0x9E3779B97F4A7C15}
}

// arena hands out byte slices from large chunks, so a block's many small
// hashes cost few allocations.
type arena struct{ buf []byte }

func (a *arena) take(n int) []byte {
	if n > 4096 {
		return make([]byte, n)
	}
	if len(a.buf) < n {
		a.buf = make([]byte, 64<<10)
	}
	out := a.buf[:n:n]
	a.buf = a.buf[n:]
	return out
}

func (r *rng) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

func (r *rng) intn(n int) int {
	if n <= 0 {
		return 0
	}
	return int(r.next() % uint64(n))
}

func (r *rng) chance(pct int) bool { return r.intn(100) < pct }

func (r *rng) bytes(n int) []byte {
	var b []byte
	if r.ar != nil {
		b = r.ar.take(n)
	} else {
		b = make([]byte, n)
	}
	for i := 0; i < n; i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.next())
		copy(b[i:], w[:])
	}
	return b
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// synth holds the constant inputs of the synthetic data: address pools,
// well-known hashes and event topics. It is built once per Server.
type synth struct {
	from, to, contract, miner, delegate [][]byte

	emptyOmmersHash, emptyRequests                     []byte
	transferTopic, approvalTopic, swapTopic, syncTopic []byte
	builderTags                                        []string
	totalDifficulty                                    decimal128.Num
}

func newSynth() *synth {
	mk := func(tag string, n int) [][]byte {
		out := make([][]byte, n)
		for k := range out {
			sum := sha256.Sum256([]byte(tag + strconv.Itoa(k)))
			out[k] = sum[:20]
		}
		return out
	}
	return &synth{
		from: mk("from", 20000), to: mk("to", 5000), contract: mk("contract", 300), miner: mk("miner", 8),
		delegate:        mk("delegate", 50),
		emptyOmmersHash: mustHex("1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347"),
		emptyRequests:   mustHex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
		transferTopic:   mustHex("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"),
		approvalTopic:   mustHex("8c5be1e5ebec7d5bd14f71427d1e84f3dd0318c25eb9925ff64d5de7a3e4c9b9"),
		swapTopic:       mustHex("c42079f94a6350d7e6235f29174924f928cc2ac818eb64fed8004e115fbcca67"),
		syncTopic:       mustHex("1c411e9a96e071241c2f21f7726b17ae89e3cab4c78be50e062b03a9fffbbad1"),
		builderTags:     []string{"beaverbuild.org", "Titan (titanbuilder.xyz)", "rsync-builder.xyz", "buildernet", ""},
		totalDifficulty: mustDecimal("58750003716598352816469"),
	}
}

func pick(r *rng, pool [][]byte) []byte { return pool[r.intn(len(pool))] }

func mustDecimal(s string) decimal128.Num {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic("ampsim: bad decimal " + s)
	}
	return decimal128.FromBigInt(v)
}

func ts(b *Block) arrow.Timestamp { return arrow.Timestamp(b.Timestamp.UnixNano()) }

func hashBytes(h [32]byte) []byte { return append([]byte(nil), h[:]...) }

func chainID(cfg NetworkConfig) uint64 {
	switch cfg.Network {
	case "mainnet", "eth", "ethereum":
		return 1
	case "base":
		return 8453
	case "arbitrum-one":
		return 42161
	default:
		return 1
	}
}

func genBlocks(sy *synth, cfg NetworkConfig, b *Block, out sink) {
	r := newRNG(b.Hash, 0)
	gasLimit := uint64(60_000_000)
	baseFee := 50_000_000 + r.next()%3_000_000_000
	tag := sy.builderTags[r.intn(len(sy.builderTags))]
	out.u64(b.Number)
	out.u64(b.Number)
	out.tstamp(ts(b))
	out.bin(hashBytes(b.Hash))
	out.bin(hashBytes(b.Parent))
	out.bin(sy.emptyOmmersHash)
	out.bin(pick(r, sy.miner))
	out.bin(r.bytes(32))
	out.bin(r.bytes(32))
	out.bin(r.bytes(32))
	out.bin(r.bytes(256))
	out.dec(decimal128.FromU64(0))
	out.dec(sy.totalDifficulty)
	out.u64(gasLimit)
	out.u64(gasLimit*3/10 + r.next()%(gasLimit*4/10))
	out.bin([]byte(tag))
	out.bin(r.bytes(32))
	out.u64(0)
	out.dec(decimal128.FromU64(baseFee))
	out.bin(r.bytes(32))
	out.u64(uint64(r.intn(10)) * 131072)
	out.u64(uint64(r.intn(40)) * 131072)
	out.bin(r.bytes(32))
	out.bin(sy.emptyRequests)
	out.endRow()
}

func txCount(cfg NetworkConfig, b *Block) int {
	if cfg.TxPerBlock < 0 {
		return 0
	}
	return cfg.TxPerBlock/2 + newRNG(b.Hash, 1).intn(cfg.TxPerBlock+1)
}

func logsOfTx(cfg NetworkConfig, b *Block, i int) int {
	if cfg.LogsPerTx < 0 {
		return 0
	}
	return newRNG(b.Hash, 1_000_000+uint64(i)).intn(2*cfg.LogsPerTx + 1)
}

func logCount(cfg NetworkConfig, b *Block) int {
	n := 0
	for i := range txCount(cfg, b) {
		n += logsOfTx(cfg, b, i)
	}
	return n
}

func txHash(b *Block, i int) []byte {
	var buf [40]byte
	copy(buf[:32], b.Hash[:])
	binary.BigEndian.PutUint64(buf[32:], uint64(i))
	sum := sha256.Sum256(buf[:])
	return sum[:]
}

func genTransactions(sy *synth, cfg NetworkConfig, b *Block, out sink) {
	n := txCount(cfg, b)
	ar := &arena{}
	bh := hashBytes(b.Hash)
	bts := ts(b)
	baseFee := 50_000_000 + newRNG(b.Hash, 0).next()%3_000_000_000
	var cumGas uint64
	cid := chainID(cfg)
	for i := range n {
		r := newRNG(b.Hash, 2_000_000+uint64(i))
		r.ar = ar
		var typ int32
		switch p := r.intn(100); {
		case p < 15:
			typ = 0
		case p < 17:
			typ = 1
		case p < 97:
			typ = 2
		case p < 99:
			typ = 3
		default:
			typ = 4
		}
		transfer := r.chance(30)
		to := pick(r, sy.to)
		if !transfer && r.chance(1) {
			to = nil
		}
		gasLimit := uint64(21000)
		input := []byte{}
		if !transfer {
			gasLimit = 50_000 + r.next()%950_000
			input = r.bytes(4 + 32*r.intn(9))
			if r.chance(2) {
				input = r.bytes(1024 + r.intn(4096))
			}
		}
		used := gasLimit
		if !transfer {
			used = gasLimit/3 + r.next()%(gasLimit*2/3)
		}
		cumGas += used
		tip := r.next() % 2_000_000_000
		price := decimal128.FromU64(baseFee + tip)
		value := "0"
		if transfer || r.chance(20) {
			if v := r.next() % 1_000_000_000_000; v != 0 {
				value = strconv.FormatUint(v, 10) + "00000000" // wei: up to 100 ETH
			}
		}
		maxFee, maxPrio := price, decimal128.Num{}
		if typ >= 2 {
			maxFee = decimal128.FromU64(2*baseFee + tip)
			maxPrio = decimal128.FromU64(tip)
		}
		var accessList, blobHashes, authList any
		if typ >= 1 {
			al := []any{}
			for range r.intn(3) - 1 { // mostly empty
				keys := []any{}
				for range r.intn(4) {
					keys = append(keys, r.bytes(32))
				}
				al = append(al, []any{pick(r, sy.to), keys})
			}
			accessList = al
		}
		var maxBlob decimal128.Num
		if typ == 3 {
			maxBlob = decimal128.FromU64(1 + r.next()%10_000_000_000)
			hs := []any{}
			for range 1 + r.intn(6) {
				h := r.bytes(32)
				h[0] = 0x01
				hs = append(hs, h)
			}
			blobHashes = hs
		}
		if typ == 4 {
			as := []any{}
			for range 1 + r.intn(2) {
				as = append(as, []any{cid, pick(r, sy.delegate), r.next() % 1000, r.chance(50), r.bytes(32), r.bytes(32)})
			}
			authList = as
		}
		out.u64(b.Number)
		out.bin(bh)
		out.u64(b.Number)
		out.tstamp(bts)
		out.u32(uint32(i))
		out.bin(txHash(b, i))
		if to == nil {
			out.null()
		} else {
			out.bin(to)
		}
		out.u64(r.next() % 100_000)
		out.dec(price)
		out.u64(gasLimit)
		out.str(value)
		out.bin(input)
		out.bin(r.bytes(32))
		out.bin(r.bytes(32))
		out.boolean(r.chance(50))
		out.u64(cid)
		out.u64(cumGas)
		out.i32(typ)
		out.dec(maxFee)
		if typ >= 2 {
			out.dec(maxPrio)
		} else {
			out.null()
		}
		if typ == 3 {
			out.dec(maxBlob)
		} else {
			out.null()
		}
		out.bin(pick(r, sy.from))
		out.boolean(!r.chance(3))
		out.null() // state_root: post-Byzantium
		out.nested(accessList)
		out.nested(blobHashes)
		out.nested(authList)
		out.endRow()
	}
}

func genLogs(sy *synth, cfg NetworkConfig, b *Block, out sink) {
	logIndex := uint32(0)
	ar := &arena{}
	bh := hashBytes(b.Hash)
	bts := ts(b)
	for i := range txCount(cfg, b) {
		k := logsOfTx(cfg, b, i)
		if k == 0 {
			continue
		}
		th := txHash(b, i)
		r := newRNG(b.Hash, 3_000_000+uint64(i))
		r.ar = ar
		for range k {
			var topics [4][]byte
			switch p := r.intn(100); {
			case p < 60:
				topics = [4][]byte{sy.transferTopic, pad32(ar, pick(r, sy.from)), pad32(ar, pick(r, sy.to)), nil}
			case p < 70:
				topics = [4][]byte{sy.approvalTopic, pad32(ar, pick(r, sy.from)), pad32(ar, pick(r, sy.to)), nil}
			case p < 85:
				topics = [4][]byte{sy.swapTopic, pad32(ar, pick(r, sy.to)), pad32(ar, pick(r, sy.to)), nil}
			case p < 95:
				topics = [4][]byte{sy.syncTopic, nil, nil, nil}
			case p < 98:
				topics = [4][]byte{r.bytes(32), r.bytes(32), r.bytes(32), r.bytes(32)}
			}
			out.u64(b.Number)
			out.bin(bh)
			out.u64(b.Number)
			out.tstamp(bts)
			out.bin(th)
			out.u32(uint32(i))
			out.u32(logIndex)
			out.bin(pick(r, sy.contract))
			for _, tp := range topics {
				if tp == nil {
					out.null()
				} else {
					out.bin(tp)
				}
			}
			out.bin(r.bytes(32 * r.intn(5)))
			out.endRow()
			logIndex++
		}
	}
}

func pad32(ar *arena, addr []byte) []byte {
	out := ar.take(32)
	clear(out)
	copy(out[12:], addr)
	return out
}

// sink receives generated rows value by value, in schema column order.
// Binary and FixedSizeBinary values both go through bin; nested (list and
// struct) values are []any trees, nil for null.
type sink interface {
	u64(uint64)
	u32(uint32)
	i32(int32)
	boolean(bool)
	str(string)
	bin([]byte)
	dec(decimal128.Num)
	tstamp(arrow.Timestamp)
	null()
	nested(any)
	endRow()
}

// rowSink collects rows as []any (for filters and synthetic batches).
type rowSink struct {
	cur  row
	rows []row
}

func (s *rowSink) u64(v uint64)             { s.cur = append(s.cur, v) }
func (s *rowSink) u32(v uint32)             { s.cur = append(s.cur, v) }
func (s *rowSink) i32(v int32)              { s.cur = append(s.cur, v) }
func (s *rowSink) boolean(v bool)           { s.cur = append(s.cur, v) }
func (s *rowSink) str(v string)             { s.cur = append(s.cur, v) }
func (s *rowSink) bin(v []byte)             { s.cur = append(s.cur, v) }
func (s *rowSink) dec(v decimal128.Num)     { s.cur = append(s.cur, v) }
func (s *rowSink) tstamp(v arrow.Timestamp) { s.cur = append(s.cur, v) }
func (s *rowSink) null()                    { s.cur = append(s.cur, nil) }
func (s *rowSink) nested(v any)             { s.cur = append(s.cur, v) }
func (s *rowSink) endRow() {
	s.rows = append(s.rows, s.cur)
	s.cur = make(row, 0, len(s.cur))
}

// genRows returns the rows of block b of table t.
func genRows(t *table, sy *synth, cfg NetworkConfig, b *Block) []row {
	var rs rowSink
	t.gen(sy, cfg, b, &rs)
	return rs.rows
}

// builderSink appends generated values straight into Arrow builders: the
// fast path for scans without filters. bs[c] is the builder of source
// column c, nil when the column is not selected.
type builderSink struct {
	bs    []array.Builder
	col   int
	onRow func()
}

func (s *builderSink) next() array.Builder {
	b := s.bs[s.col]
	s.col++
	return b
}

func (s *builderSink) u64(v uint64) {
	if b := s.next(); b != nil {
		b.(*array.Uint64Builder).Append(v)
	}
}

func (s *builderSink) u32(v uint32) {
	if b := s.next(); b != nil {
		b.(*array.Uint32Builder).Append(v)
	}
}

func (s *builderSink) i32(v int32) {
	if b := s.next(); b != nil {
		b.(*array.Int32Builder).Append(v)
	}
}

func (s *builderSink) boolean(v bool) {
	if b := s.next(); b != nil {
		b.(*array.BooleanBuilder).Append(v)
	}
}

func (s *builderSink) str(v string) {
	if b := s.next(); b != nil {
		appendValue(b, v)
	}
}

func (s *builderSink) bin(v []byte) {
	switch b := s.next().(type) {
	case *array.FixedSizeBinaryBuilder:
		b.Append(v)
	case *array.BinaryBuilder:
		b.Append(v)
	}
}

func (s *builderSink) dec(v decimal128.Num) {
	if b := s.next(); b != nil {
		b.(*array.Decimal128Builder).Append(v)
	}
}

func (s *builderSink) tstamp(v arrow.Timestamp) {
	if b := s.next(); b != nil {
		b.(*array.TimestampBuilder).Append(v)
	}
}

func (s *builderSink) null() {
	if b := s.next(); b != nil {
		b.AppendNull()
	}
}

func (s *builderSink) nested(v any) {
	if b := s.next(); b != nil {
		appendValue(b, v)
	}
}

func (s *builderSink) endRow() {
	s.col = 0
	if s.onRow != nil {
		s.onRow()
	}
}
