CREATE TABLE transactions (
  block_num   BIGINT NOT NULL,
  tx_index    BIGINT NOT NULL,
  tx_hash     BYTES  NOT NULL,
  `timestamp` BIGINT NOT NULL, -- nanoseconds since the Unix epoch
  `from`      BYTES  NOT NULL,
  `to`        BYTES,
  `value`     STRING NOT NULL,
  gas_price   DECIMAL(38, 0),
  PRIMARY KEY (tx_hash) NOT ENFORCED
) WITH (
  -- for a stream with fixed_as: bytes
  'connector' = 'kafka', 'topic' = 'amp.mainnet_txs',
  'properties.bootstrap.servers' = 'kafka:9092', 'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'debezium-avro-confluent', 'debezium-avro-confluent.url' = 'http://schema-registry:8081'
);
