"""Decode Confluent-framed Avro records with fastavro (an independent,
non-Go Avro implementation) and print them as normalised JSON.

Usage: fastavro_decode.py SCHEMA.avsc RECORDS.bin SCHEMA_ID

RECORDS.bin holds records as a 4-byte big-endian length followed by the
framed record (magic 0, 4-byte big-endian schema id, Avro body). The output
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
    schema_path, records_path, schema_id = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(schema_path) as f:
        schema = fastavro.parse_schema(json.load(f))
    with open(records_path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        rec = data[pos + 4 : pos + 4 + n]
        pos += 4 + n
        magic, sid = rec[0], struct.unpack(">I", rec[1:5])[0]
        if magic != 0 or sid != schema_id:
            raise SystemExit(f"record {len(out)}: header {rec[:5].hex()} is not Confluent magic 0 + id {schema_id}")
        body = io.BytesIO(rec[5:])
        value = fastavro.schemaless_reader(body, schema)
        if body.tell() != len(rec) - 5:
            raise SystemExit(f"record {len(out)}: {len(rec) - 5 - body.tell()} trailing bytes")
        out.append(norm(value))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
