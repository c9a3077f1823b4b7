"""Decode Confluent-framed Avro records with fastavro (an independent,
non-Go Avro implementation) and print them as normalised JSON.

Usage: fastavro_decode.py SCHEMA.avsc RECORDS.bin SCHEMA_ID|single-object

RECORDS.bin holds records as a 4-byte big-endian length followed by the
framed record: magic 0, 4-byte big-endian schema id, Avro body (Confluent);
or, with single-object, C3 01, the 8-byte little-endian CRC-64-AVRO
fingerprint of the schema's Parsing Canonical Form as fastavro computes it,
Avro body. The output
is a JSON list with one object per record, normalised as the Go test does:
bytes and fixed as "hex:<hex>", decimals as the decimal string of the
unscaled integer, timestamp-micros/millis datetimes as integers in their
unit, dates as days since the epoch.
"""

import datetime
import decimal
import io
import json
import struct
import sys

import fastavro
import fastavro.schema

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def norm(v):
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return "hex:" + bytes(v).hex()
    if isinstance(v, decimal.Decimal):
        # The unscaled integer, read from the digits: arithmetic would round
        # to the default context's 28 digits.
        sign, digits, _ = v.as_tuple()
        n = int("".join(map(str, digits)) or "0")
        return str(-n if sign else n)
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return (v - EPOCH) // datetime.timedelta(microseconds=1)
    if isinstance(v, datetime.date):
        return (v - datetime.date(1970, 1, 1)).days
    return v


def main():
    schema_path, records_path, framing = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(schema_path) as f:
        schema = fastavro.parse_schema(json.load(f))
    if framing == "single-object":
        fp = fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(schema), "CRC-64-AVRO")
        header = b"\xc3\x01" + bytes.fromhex(fp)
    else:
        header = b"\x00" + struct.pack(">I", int(framing))
    with open(records_path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        rec = data[pos + 4 : pos + 4 + n]
        pos += 4 + n
        if rec[: len(header)] != header:
            raise SystemExit(f"record {len(out)}: header {rec[:len(header)].hex()} is not {header.hex()} ({framing})")
        body = io.BytesIO(rec[len(header) :])
        value = fastavro.schemaless_reader(body, schema)
        if body.tell() != len(rec) - len(header):
            raise SystemExit(f"record {len(out)}: {len(rec) - len(header) - body.tell()} trailing bytes")
        out.append(norm(value))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
