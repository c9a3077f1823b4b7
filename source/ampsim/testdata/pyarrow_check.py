#!/usr/bin/env python3
"""Independent reader: talks to an Amp Flight server the way the Amp Python SDK
does (pyarrow.flight; Any(CommandStatementQuery) descriptor; GetFlightInfo then
DoGet on the first endpoint's ticket) and checks the wire contract of
amp-protocol.md: the Arrow schema of each EVM table (types written out here
from §4.3, independently of the Go code), the app_metadata JSON of every batch,
the microbatch sequence rules, and the row counts the Go side expects.

usage: pyarrow_check.py ADDR EXPECTATIONS_JSON

EXPECTATIONS_JSON:
  {"batch":  [{"sql": ..., "table": "transactions", "rows": N,
               "ranges": [<BlockRange JSON>...]}, ...],
   "stream": [{"sql": ..., "table": ..., "headers": {"amp-stream": "true", ...},
               "microbatches": [{"start": S, "end": E, "hash": H, "prev_hash": P,
                                 "rows": N}, ...]}, ...]}
Exit status 0 and "OK ..." on success; 1 with the failing check otherwise.
"""
import json
import re
import sys

import pyarrow as pa
import pyarrow.flight as fl

HASH_RE = re.compile(r"^0x[0-9a-f]{64}$")

H32 = pa.binary(32)
A20 = pa.binary(20)
CUR = pa.decimal128(38, 0)
TS = pa.timestamp("ns", tz="+00:00")


def f(name, typ, nullable=False):
    return pa.field(name, typ, nullable=nullable)


def lst(typ):
    return pa.list_(pa.field("item", typ, nullable=False))


SCHEMAS = {
    "blocks": pa.schema([
        f("_block_num", pa.uint64()), f("block_num", pa.uint64()), f("timestamp", TS),
        f("hash", H32), f("parent_hash", H32), f("ommers_hash", H32), f("miner", A20),
        f("state_root", H32), f("transactions_root", H32), f("receipt_root", H32),
        f("logs_bloom", pa.binary()), f("difficulty", CUR), f("total_difficulty", CUR, True),
        f("gas_limit", pa.uint64()), f("gas_used", pa.uint64()), f("extra_data", pa.binary()),
        f("mix_hash", H32), f("nonce", pa.uint64()), f("base_fee_per_gas", CUR, True),
        f("withdrawals_root", H32, True), f("blob_gas_used", pa.uint64(), True),
        f("excess_blob_gas", pa.uint64(), True), f("parent_beacon_root", H32, True),
        f("requests_hash", H32, True),
    ]),
    "transactions": pa.schema([
        f("_block_num", pa.uint64()), f("block_hash", H32), f("block_num", pa.uint64()),
        f("timestamp", TS), f("tx_index", pa.uint32()), f("tx_hash", H32), f("to", A20, True),
        f("nonce", pa.uint64()), f("gas_price", CUR, True), f("gas_limit", pa.uint64()),
        f("value", pa.string()), f("input", pa.binary()), f("r", H32), f("s", H32),
        f("v_parity", pa.bool_()), f("chain_id", pa.uint64(), True), f("gas_used", pa.uint64()),
        f("type", pa.int32()), f("max_fee_per_gas", CUR, True),
        f("max_priority_fee_per_gas", CUR, True), f("max_fee_per_blob_gas", CUR, True),
        f("from", A20), f("status", pa.bool_()), f("state_root", H32, True),
        f("access_list", lst(pa.struct([f("address", A20), f("storage_keys", lst(H32))])), True),
        f("blob_versioned_hashes", lst(H32), True),
        f("authorization_list", lst(pa.struct([
            f("chain_id", pa.uint64()), f("address", A20), f("nonce", pa.uint64()),
            f("y_parity", pa.bool_()), f("r", H32), f("s", H32)])), True),
    ]),
    "logs": pa.schema([
        f("_block_num", pa.uint64()), f("block_hash", H32), f("block_num", pa.uint64()),
        f("timestamp", TS), f("tx_hash", H32), f("tx_index", pa.uint32()),
        f("log_index", pa.uint32()), f("address", A20), f("topic0", H32, True),
        f("topic1", H32, True), f("topic2", H32, True), f("topic3", H32, True),
        f("data", pa.binary()),
    ]),
}


class CheckError(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CheckError(msg)


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_bytes(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data


def descriptor(sql):
    """FlightDescriptor.for_command(Any(CommandStatementQuery{query})), the
    protobuf bytes written by hand as amp-python's get_sql does with protos."""
    cmd = pb_bytes(1, sql.encode())
    url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return fl.FlightDescriptor.for_command(pb_bytes(1, url) + pb_bytes(2, cmd))


def parse_meta(raw, where):
    check(raw is not None and raw.size > 0, f"{where}: a record batch without app_metadata")
    try:
        m = json.loads(raw.to_pybytes().decode("utf-8"))
    except ValueError as e:
        raise CheckError(f"{where}: app_metadata is not JSON: {e}")
    check(isinstance(m, dict) and set(m) == {"ranges", "ranges_complete"},
          f"{where}: app_metadata keys are {sorted(m)}, want ranges and ranges_complete")
    check(isinstance(m["ranges_complete"], bool), f"{where}: ranges_complete is not a bool")
    check(isinstance(m["ranges"], list), f"{where}: ranges is not a list")
    for r in m["ranges"]:
        check(list(r)[:4] == ["numbers", "network", "hash", "prev_hash"],
              f"{where}: range keys in order numbers, network, hash, prev_hash: {list(r)}")
        check(set(r["numbers"]) == {"start", "end"}, f"{where}: numbers is {r['numbers']}")
        check(r["numbers"]["start"] <= r["numbers"]["end"], f"{where}: start > end in {r}")
        check(isinstance(r["network"], str) and r["network"], f"{where}: empty network")
        check(HASH_RE.match(r["hash"]), f"{where}: hash {r['hash']!r} is not 0x + 64 lowercase hex")
        check(r["prev_hash"] is None or HASH_RE.match(r["prev_hash"]), f"{where}: bad prev_hash {r['prev_hash']!r}")
        check(set(r) <= {"numbers", "network", "hash", "prev_hash", "timestamp"}, f"{where}: unknown keys {set(r)}")
        if "timestamp" in r:
            check(isinstance(r["timestamp"], int) and r["timestamp"] > 0, f"{where}: bad timestamp {r['timestamp']!r}")
    return m


def call_options(headers):
    hs = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    return fl.FlightCallOptions(headers=hs)


def open_stream(client, sql, table, headers=None):
    info = client.get_flight_info(descriptor(sql), call_options(headers))
    check(len(info.endpoints) == 1, f"{sql}: {len(info.endpoints)} endpoints, want 1")
    check(info.schema.equals(SCHEMAS[table], check_metadata=False),
          f"{sql}: FlightInfo schema differs from Amp's {table} schema:\n{info.schema}")
    reader = client.do_get(info.endpoints[0].ticket)
    return reader


def check_batch(client, case):
    sql, table = case["sql"], case["table"]
    reader = open_stream(client, sql, table, case.get("headers"))
    check(reader.schema.equals(SCHEMAS[table], check_metadata=False),
          f"{sql}: stream schema differs from Amp's {table} schema:\n{reader.schema}")
    metas, rows = [], []
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        check(chunk.data is not None, f"{sql}: a chunk without a record batch")
        check(chunk.data.schema.equals(SCHEMAS[table]), f"{sql}: batch schema differs")
        metas.append(parse_meta(chunk.app_metadata, f"{sql} batch {len(metas)}"))
        rows.append(chunk.data.num_rows)
    check(len(metas) >= 2, f"{sql}: {len(metas)} batches, want >= 2 (data, completion)")
    for i, m in enumerate(metas):
        check(m["ranges"] == case["ranges"], f"{sql} batch {i}: ranges {m['ranges']} != {case['ranges']}")
        check(m["ranges_complete"] == (i == len(metas) - 1), f"{sql} batch {i}: wrong ranges_complete")
    check(rows[-1] == 0, f"{sql}: completion batch has {rows[-1]} rows")
    check(sum(rows) == case["rows"], f"{sql}: {sum(rows)} rows, want {case['rows']}")
    return f"batch {table}: {len(metas)} batches, {sum(rows)} rows"


def check_stream(client, case):
    sql, table = case["sql"], case["table"]
    want = case["microbatches"]
    reader = open_stream(client, sql, table, case.get("headers"))
    got, cur, prev = [], None, None
    n = 0
    while len(got) < len(want):
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            raise CheckError(f"{sql}: the stream ended after {len(got)} microbatches; a streaming query never ends")
        where = f"{sql} batch {n}"
        n += 1
        check(chunk.data.schema.equals(SCHEMAS[table]), f"{where}: batch schema differs")
        m = parse_meta(chunk.app_metadata, where)
        check(len(m["ranges"]) == 1, f"{where}: streaming ranges must have exactly one element")
        r = m["ranges"][0]
        if cur is None:
            cur = {"range": r, "rows": 0}
            if prev is not None:
                check(r["numbers"]["start"] == prev["numbers"]["end"] + 1, f"{where}: not consecutive to {prev}")
                check(r["prev_hash"] == prev["hash"], f"{where}: prev_hash != previous hash")
        check(r == cur["range"], f"{where}: range changed inside a microbatch: {r} != {cur['range']}")
        cur["rows"] += chunk.data.num_rows
        if m["ranges_complete"]:
            check(chunk.data.num_rows == 0, f"{where}: completion batch with rows")
            got.append(cur)
            prev, cur = r, None
    reader.cancel()
    for i, (g, w) in enumerate(zip(got, want)):
        r = g["range"]
        check((r["numbers"]["start"], r["numbers"]["end"]) == (w["start"], w["end"]),
              f"{sql} microbatch {i}: {r['numbers']} != {w['start']}..={w['end']}")
        check(r["hash"] == w["hash"] and r["prev_hash"] == w["prev_hash"], f"{sql} microbatch {i}: hashes differ")
        check(g["rows"] == w["rows"], f"{sql} microbatch {i}: {g['rows']} rows, want {w['rows']}")
    return f"stream {table}: {len(got)} microbatches, {sum(g['rows'] for g in got)} rows"


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    addr, expect = sys.argv[1], json.loads(sys.argv[2])
    client = fl.FlightClient(f"grpc+tcp://{addr}")
    try:
        done = [check_batch(client, c) for c in expect.get("batch", [])]
        done += [check_stream(client, c) for c in expect.get("stream", [])]
    except CheckError as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    print(f"OK pyarrow {pa.__version__}: " + "; ".join(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
