#!/usr/bin/env python3
"""The Amp Python SDK's way of loading Amp data into Kafka, reproduced for
make bench (test/perf peer "python-loader"). It is not the SDK's code: it
reproduces the loop of its Kafka loader (amp-python, loaders/implementations
kafka_loader.py, _load_batch_impl) with the packages of this project's venv:

  - pyarrow.flight: GetFlightInfo with Any(CommandStatementQuery{sql}), then
    DoGet on the first endpoint's ticket, as the SDK's client does;
  - per Arrow record batch: batch.to_pydict(), one dict per row with
    '_type': 'data', json.dumps(row, default=str) as the value, no key (the
    loader's key_field 'id' is not a column of eth_rpc.transactions);
  - one Kafka transaction per record batch (begin, produce every row,
    commit), with confluent-kafka (librdkafka) in place of kafka-python.

usage: amp_loader_loop.py AMP_ADDR SQL BROKERS TOPIC
Runs until SIGTERM; prints one line per 100 batches.
"""
import json
import os
import signal
import sys

import pyarrow.flight as fl
from confluent_kafka import Producer


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
    cmd = pb_bytes(1, sql.encode())
    url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return fl.FlightDescriptor.for_command(pb_bytes(1, url) + pb_bytes(2, cmd))


def main():
    addr, sql, brokers, topic = sys.argv[1:5]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    producer = Producer({
        "bootstrap.servers": brokers,
        "client.id": "amp-kafka-loader",
        "transactional.id": f"amp-kafka-loader-txn-{os.getpid()}",
    })
    producer.init_transactions()
    client = fl.connect(f"grpc://{addr}")
    info = client.get_flight_info(descriptor(sql))
    reader = client.do_get(info.endpoints[0].ticket)
    batches = rows = 0
    for chunk in reader:
        if stop:
            break
        batch = chunk.data
        if batch is None or batch.num_rows == 0:
            continue
        data = batch.to_pydict()
        producer.begin_transaction()
        for i in range(batch.num_rows):
            row = {field: values[i] for field, values in data.items()}
            row["_type"] = "data"
            value = json.dumps(row, default=str).encode("utf-8")
            while True:
                try:
                    producer.produce(topic, value=value)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.commit_transaction()
        batches += 1
        rows += batch.num_rows
        if batches % 100 == 0:
            print(f"{batches} batches, {rows} rows", flush=True)
    producer.flush(10)


if __name__ == "__main__":
    main()
