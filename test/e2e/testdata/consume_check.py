#!/usr/bin/env python3
"""Independent consumer of an amp-kafka-bridge data topic.

Written against Confluent's own client (confluent-kafka from PyPI: librdkafka,
its SchemaRegistryClient and its AvroDeserializer), so the Kafka transactions,
the Confluent wire format, the registry subjects and the Debezium-style
envelope are checked by code nobody on this project wrote.

It reads the whole data topic with isolation.level=read_committed from the
beginning, and replays it as a downstream table would:

  * op c / r (value.after set)  insert row (source.batch_id, source.row)
  * op d     (value.before set) retract row (source.batch_id, source.row)
  * value null (tombstone)      drop every row of batch id = key

It also checks every record's headers (amp-batch-id, amp-op, amp-network,
amp-range, amp-stream) against its key and value, and that every schema id it
met is registered under the subject <topic>-value.

With --flight and --sql it runs the batch SQL at the Amp (simulator) Flight
endpoint with pyarrow.flight, as the Amp Python SDK does, and compares the
surviving rows with Amp's rows, column by column (canonical JSON, bytes as
0x-hex, decimals as strings, timestamps as integer nanoseconds).

usage: consume_check.py --bootstrap HOST:PORT --registry URL --topic T
                        [--flight HOST:PORT --sql "SELECT ..."]
                        [--identity _block_num,block_hash,tx_index]
                        [--timeout 60]

Prints one JSON object on stdout. Exit status 0 when it could read the topic
(whatever it found: the caller judges the JSON), 2 on usage or I/O errors.
"""
import argparse
import collections
import datetime
import decimal
import hashlib
import json
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
HEADERS = ("amp-batch-id", "amp-op", "amp-network", "amp-range", "amp-stream")
MAX_EXAMPLES = 10


def canon(v):
    """A JSON-able canonical form shared by Avro- and Arrow-decoded values."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "0x" + bytes(v).hex()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        d = v - EPOCH
        return (d.days * 86400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000
    if isinstance(v, dict):
        return {k: canon(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [canon(x) for x in v]
    return v


def row_text(row):
    return json.dumps(canon(row), sort_keys=True, separators=(",", ":"))


def header_map(msg):
    out = {}
    for k, v in msg.headers() or []:
        out[k] = v.decode("utf-8", "replace") if v is not None else None
    return out


def flight_rows(addr, sql):
    """Rows of a batch query at Amp, as the Amp Python SDK reads them."""
    import pyarrow as pa
    import pyarrow.flight as fl

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

    url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    desc = fl.FlightDescriptor.for_command(pb_bytes(1, url) + pb_bytes(2, pb_bytes(1, sql.encode())))
    client = fl.FlightClient("grpc://" + addr)
    info = client.get_flight_info(desc)
    table = client.do_get(info.endpoints[0].ticket).read_all()
    # Timestamps as integer nanoseconds (to_pylist would round to datetime).
    cols = []
    for i, field in enumerate(table.schema):
        col = table.column(i)
        if pa.types.is_timestamp(field.type):
            unit = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1000, "ns": 1}[field.type.unit]
            col = pa.chunked_array([c.cast(pa.int64()) for c in col.chunks], type=pa.int64())
            cols.append([None if x is None else x * unit for x in col.to_pylist()])
        else:
            cols.append(col.to_pylist())
    names = table.schema.names
    return [dict(zip(names, vals)) for vals in zip(*cols)] if cols else []


def consume(args):
    registry = SchemaRegistryClient({"url": args.registry})
    deser = AvroDeserializer(registry)
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": "consume-check-" + uuid.uuid4().hex,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
    })
    md = consumer.list_topics(args.topic, timeout=30)
    tmd = md.topics.get(args.topic)
    if tmd is None or tmd.error is not None:
        raise SystemExit(f"consume_check: topic {args.topic}: {tmd.error if tmd else 'missing'}")
    parts = [TopicPartition(args.topic, p, 0) for p in sorted(tmd.partitions)]
    consumer.assign(parts)

    out = collections.Counter()
    # (batch_id, row) -> [(identity tuple, row text), ...]: a list, so a
    # duplicated insert shows up as an extra row, as in an append-only sink.
    live = collections.defaultdict(list)
    removed = set()        # keys retracted or tombstoned
    examples = collections.defaultdict(list)
    schema_ids = set()
    eof = set()
    deadline = time.monotonic() + args.timeout

    def note(kind, text):
        out[kind] += 1
        if len(examples[kind]) < MAX_EXAMPLES:
            examples[kind].append(text)

    while len(eof) < len(parts):
        if time.monotonic() > deadline:
            raise SystemExit(f"consume_check: timed out after {args.timeout}s with partitions {sorted(eof)} at end")
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                eof.add(msg.partition())
                continue
            raise SystemExit(f"consume_check: {msg.error()}")
        eof.discard(msg.partition())
        out["records"] += 1
        where = f"{msg.topic()}/{msg.partition()}@{msg.offset()}"
        key = msg.key().decode("utf-8") if msg.key() is not None else None
        hdr = header_map(msg)
        for h in HEADERS:
            if h not in hdr:
                note("header_errors", f"{where}: header {h} missing")
        if hdr.get("amp-batch-id") is not None and key is not None and hdr["amp-batch-id"] != key:
            note("header_errors", f"{where}: amp-batch-id {hdr['amp-batch-id']!r} != key {key!r}")
        raw = msg.value()
        if raw is None:
            out["tombstones"] += 1
            if hdr.get("amp-op") not in ("d", "tombstone"):
                note("header_errors", f"{where}: tombstone with amp-op {hdr.get('amp-op')!r}")
            for k in [k for k in live if k[0] == key]:
                out["tombstoned_rows"] += len(live.pop(k))
                removed.add(k)
            continue
        if len(raw) < 5 or raw[0] != 0:
            note("wire_errors", f"{where}: not Confluent wire format (magic {raw[:1].hex()})")
            continue
        schema_ids.add(int.from_bytes(raw[1:5], "big"))
        ev = deser(raw, SerializationContext(msg.topic(), MessageField.VALUE, msg.headers()))
        op = ev.get("op")
        src = ev.get("source") or {}
        bkey = (src.get("batch_id"), src.get("row"))
        if src.get("batch_id") != key:
            note("envelope_errors", f"{where}: source.batch_id {src.get('batch_id')!r} != key {key!r}")
        if hdr.get("amp-op") != op:
            note("header_errors", f"{where}: amp-op {hdr.get('amp-op')!r} != op {op!r}")
        if hdr.get("amp-stream") != src.get("stream"):
            note("header_errors", f"{where}: amp-stream {hdr.get('amp-stream')!r} != source.stream {src.get('stream')!r}")
        rng = hdr.get("amp-range", "")
        if rng.split("|")[0] != f"{src.get('range_start')}-{src.get('range_end')}":
            note("header_errors", f"{where}: amp-range {rng!r} != source range {src.get('range_start')}-{src.get('range_end')}")
        if op in ("c", "r"):
            row = ev.get("after")
            if row is None or ev.get("before") is not None:
                note("envelope_errors", f"{where}: op {op} needs after set and before null")
                continue
            out["inserts"] += 1
            if src.get("block_num") is not None and row.get("_block_num") != src.get("block_num"):
                note("envelope_errors", f"{where}: source.block_num {src.get('block_num')} != _block_num {row.get('_block_num')}")
            if bkey in live:
                note("duplicate_keys", f"{where}: batch {bkey[0]} row {bkey[1]} inserted twice")
            if bkey in removed:
                note("reinserted", f"{where}: batch {bkey[0]} row {bkey[1]} inserted after it was removed")
            ident = tuple(canon(row.get(c)) for c in args.identity)
            live[bkey].append((ident, row_text(row)))
        elif op == "d":
            if ev.get("before") is None or ev.get("after") is not None:
                note("envelope_errors", f"{where}: op d needs before set and after null")
            out["retractions"] += 1
            if bkey in live:
                if live[bkey][-1][1] != row_text(ev.get("before")):
                    note("envelope_errors", f"{where}: retraction of batch {bkey[0]} row {bkey[1]} carries another row than was inserted")
                live[bkey].pop()
                if not live[bkey]:
                    del live[bkey]
                removed.add(bkey)
                out["retracted_rows"] += 1
            else:
                note("dangling_retractions", f"{where}: retraction of batch {bkey[0]} row {bkey[1]} that is not live")
        else:
            note("envelope_errors", f"{where}: unknown op {op!r}")
    consumer.close()

    subject = args.topic + "-value"
    subject_ids = set()
    for v in registry.get_versions(subject):
        subject_ids.add(registry.get_version(subject, v).schema_id)
    for sid in sorted(schema_ids - subject_ids):
        note("registry_errors", f"schema id {sid} is not a version of subject {subject}")

    entries = [e for es in live.values() for e in es]
    idents = collections.Counter(e[0] for e in entries)
    for ident, n in idents.items():
        if n > 1:
            note("duplicate_identities", f"{list(ident)} survives {n} times")
    rows = collections.Counter(e[1] for e in entries)
    result = {
        "topic": args.topic,
        "partitions": len(parts),
        "surviving": len(entries),
        "schema_ids": sorted(schema_ids),
        "subject_ids": sorted(subject_ids),
        "identities": sorted(list(i) for i in idents),
        "rows_sha256": hashlib.sha256("\n".join(sorted(rows.elements())).encode()).hexdigest(),
    }
    for k in ("records", "inserts", "retractions", "tombstones", "retracted_rows", "tombstoned_rows",
              "duplicate_keys", "reinserted", "dangling_retractions", "duplicate_identities",
              "header_errors", "envelope_errors", "wire_errors", "registry_errors"):
        result[k] = out[k]
    if args.flight:
        want = collections.Counter(row_text(r) for r in flight_rows(args.flight, args.sql))
        missing, extra = want - rows, rows - want
        result["amp"] = {
            "expected": sum(want.values()),
            "matching": sum((want & rows).values()),
            "missing": sum(missing.values()),
            "extra": sum(extra.values()),
            "rows_sha256": hashlib.sha256("\n".join(sorted(want.elements())).encode()).hexdigest(),
        }
        for r in list(missing)[:3]:
            examples["amp_missing"].append(r[:300])
        for r in list(extra)[:3]:
            examples["amp_extra"].append(r[:300])
    result["examples"] = examples
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--registry", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--flight", help="Amp Flight host:port for the expected rows")
    p.add_argument("--sql", help="batch SQL giving the expected rows (with --flight)")
    p.add_argument("--identity", default="_block_num,block_hash,tx_index",
                   help="comma-separated columns identifying a row")
    p.add_argument("--timeout", type=float, default=120)
    args = p.parse_args()
    args.identity = [c for c in args.identity.split(",") if c]
    if bool(args.flight) != bool(args.sql):
        p.error("--flight and --sql go together")
    try:
        result = consume(args)
    except SystemExit as e:
        print(str(e), file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
