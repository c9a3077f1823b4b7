package encode

import (
	"github.com/apache/arrow-go/v18/arrow"
)

// The Arrow schemas of the three EVM-RPC tables exactly as amp-protocol.md
// §4.3 lists them (N = nullable). The simulator builds the same schemas.

func evmTimestamp() arrow.DataType {
	return &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "+00:00"}
}

func fsb(n int) arrow.DataType { return &arrow.FixedSizeBinaryType{ByteWidth: n} }

func wei() arrow.DataType { return &arrow.Decimal128Type{Precision: 38, Scale: 0} }

func req(name string, dt arrow.DataType) arrow.Field { return arrow.Field{Name: name, Type: dt} }

func opt(name string, dt arrow.DataType) arrow.Field {
	return arrow.Field{Name: name, Type: dt, Nullable: true}
}

func blocksSchema() *arrow.Schema {
	u64 := arrow.PrimitiveTypes.Uint64
	return arrow.NewSchema([]arrow.Field{
		req("_block_num", u64), req("block_num", u64), req("timestamp", evmTimestamp()),
		req("hash", fsb(32)), req("parent_hash", fsb(32)), req("ommers_hash", fsb(32)), req("miner", fsb(20)),
		req("state_root", fsb(32)), req("transactions_root", fsb(32)), req("receipt_root", fsb(32)),
		req("logs_bloom", arrow.BinaryTypes.Binary), req("difficulty", wei()), opt("total_difficulty", wei()),
		req("gas_limit", u64), req("gas_used", u64), req("extra_data", arrow.BinaryTypes.Binary),
		req("mix_hash", fsb(32)), req("nonce", u64), opt("base_fee_per_gas", wei()), opt("withdrawals_root", fsb(32)),
		opt("blob_gas_used", u64), opt("excess_blob_gas", u64), opt("parent_beacon_root", fsb(32)),
		opt("requests_hash", fsb(32)),
	}, nil)
}

func transactionsSchema() *arrow.Schema {
	u64 := arrow.PrimitiveTypes.Uint64
	accessList := arrow.ListOf(arrow.StructOf(
		req("address", fsb(20)),
		req("storage_keys", arrow.ListOf(fsb(32))),
	))
	authList := arrow.ListOf(arrow.StructOf(
		req("chain_id", u64), req("address", fsb(20)), req("nonce", u64),
		req("y_parity", arrow.FixedWidthTypes.Boolean), req("r", fsb(32)), req("s", fsb(32)),
	))
	return arrow.NewSchema([]arrow.Field{
		req("_block_num", u64), req("block_hash", fsb(32)), req("block_num", u64), req("timestamp", evmTimestamp()),
		req("tx_index", arrow.PrimitiveTypes.Uint32), req("tx_hash", fsb(32)), opt("to", fsb(20)),
		req("nonce", u64), opt("gas_price", wei()), req("gas_limit", u64), req("value", arrow.BinaryTypes.String),
		req("input", arrow.BinaryTypes.Binary), req("r", fsb(32)), req("s", fsb(32)),
		req("v_parity", arrow.FixedWidthTypes.Boolean), opt("chain_id", u64), req("gas_used", u64),
		req("type", arrow.PrimitiveTypes.Int32), opt("max_fee_per_gas", wei()), opt("max_priority_fee_per_gas", wei()),
		opt("max_fee_per_blob_gas", wei()), req("from", fsb(20)), req("status", arrow.FixedWidthTypes.Boolean),
		opt("state_root", fsb(32)), opt("access_list", accessList),
		opt("blob_versioned_hashes", arrow.ListOf(fsb(32))), opt("authorization_list", authList),
	}, nil)
}

func logsSchema() *arrow.Schema {
	u64 := arrow.PrimitiveTypes.Uint64
	u32 := arrow.PrimitiveTypes.Uint32
	return arrow.NewSchema([]arrow.Field{
		req("_block_num", u64), req("block_hash", fsb(32)), req("block_num", u64), req("timestamp", evmTimestamp()),
		req("tx_hash", fsb(32)), req("tx_index", u32), req("log_index", u32), req("address", fsb(20)),
		opt("topic0", fsb(32)), opt("topic1", fsb(32)), opt("topic2", fsb(32)), opt("topic3", fsb(32)),
		req("data", arrow.BinaryTypes.Binary),
	}, nil)
}
