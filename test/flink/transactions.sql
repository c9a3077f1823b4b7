CREATE TABLE transactions (
  block_num   BIGINT        NOT NULL,
  tx_index    BIGINT        NOT NULL,
  tx_hash     VARBINARY(32) NOT NULL,
  `timestamp` BIGINT        NOT NULL, -- nanoseconds since the Unix epoch
  `from`      VARBINARY(20) NOT NULL,
  `to`        VARBINARY(20),
  `value`     STRING        NOT NULL,
  gas_price   DECIMAL(38, 0),
  PRIMARY KEY (tx_hash) NOT ENFORCED
) WITH (
  'connector' = 'kafka', 'topic' = 'amp.mainnet_txs',
  'properties.bootstrap.servers' = 'kafka:9092', 'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'debezium-avro-confluent', 'debezium-avro-confluent.url' = 'http://schema-registry:8081',
  -- The reader schema: the columns above, with the bridge's Avro fixed types for hashes and
  -- addresses (the schema Flink derives by itself has bytes, which cannot read a fixed).
  'debezium-avro-confluent.schema' = '["null", {"type": "record", "name": "Envelope", "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
      {"name": "block_num", "type": "long"},
      {"name": "tx_index", "type": "long"},
      {"name": "tx_hash", "type": {"type": "fixed", "name": "Bytes32", "size": 32}},
      {"name": "timestamp", "type": "long"},
      {"name": "from", "type": {"type": "fixed", "name": "Bytes20", "size": 20}},
      {"name": "to", "type": ["null", "Bytes20"], "default": null},
      {"name": "value", "type": "string"},
      {"name": "gas_price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0}], "default": null}
    ]}], "default": null},
    {"name": "after", "type": ["null", "Value"], "default": null},
    {"name": "op", "type": ["null", "string"], "default": null}
  ]}]'
);
