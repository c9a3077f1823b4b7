package local.kstreams;

import java.io.PrintStream;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * A Kafka Streams application, as a user would write it, that materialises a data topic of
 * amp-kafka-bridge (Debezium envelope, Confluent wire format) as a KTable of transactions: op c or
 * r puts {@code after}, op d deletes the key of {@code before}, the bridge's tombstones (null
 * values) are skipped. The table's key is the event's identity, batch id (the record key) and
 * source.row, or tx_hash for a stream keyed by tx_hash ({@code key: row}): not tx_hash for a
 * stream keyed by batch id, whose retraction of a row and its insert in a replacement batch can be
 * on two partitions, in either order. The table's key is not the record key, so the topology
 * re-keys (Kafka Streams repartitions through an internal topic; the events of one key all come
 * from one input partition, so they stay in order).
 *
 * <p>It runs with processing.guarantee=exactly_once_v2 (so it reads read_committed) from the
 * earliest offsets. Once it has processed every input partition up to the end offsets the topic
 * had when it started (and its repartition topic up to its end), it prints the table: one JSON
 * object per row on stdout, sorted, with the row's columns in schema order (bytes and fixed as "0x"
 * + lowercase hex, decimals as plain strings, records as objects, arrays as arrays); and on stderr
 * a line {@code kstreams-table summary: {...}}. Exit code 0 on success, 1 on an error, 2 on bad
 * arguments, 3 on timeout.
 *
 * <p>Arguments: {@code --bootstrap HOST:PORT --registry URL --topic TOPIC --application-id ID
 * [--key event|tx_hash] [--state-dir DIR] [--reader-schema FILE] [--timeout SECONDS]}; --key picks
 * the table's key (default: the event's identity, batch id and row index); with --reader-schema
 * the rows are read with that Avro schema (of the whole envelope) instead of the writer's.
 */
public final class TransactionsTable {
    private TransactionsTable() {}

    static final String STORE = "transactions"; // the store in the topology

    /**
     * The topology, the README's example: a KTable of the live rows, keyed by the event's identity
     * (batch id, row index), or with byTxHash by tx_hash, which is right only for a stream with
     * {@code key: row} and {@code key_columns: [tx_hash]} (see the README). events reads the
     * topic, rows writes and reads the table's repartition and changelog topics: the same Serde
     * unless events resolves to a reader schema (of the envelope).
     */
    static StreamsBuilder topology(String topic, Serde<GenericRecord> events, Serde<GenericRecord> rows,
            boolean byTxHash) {
        // README: begin
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, GenericRecord> transactions = builder
                .stream(topic, Consumed.with(Serdes.String(), events)) // key: the batch id
                .filter((batchId, event) -> event != null) // the batch's tombstone, after its retractions
                .map((batchId, event) -> {
                    boolean retraction = "d".equals(String.valueOf(event.get("op")));
                    GenericRecord row = (GenericRecord) event.get(retraction ? "before" : "after");
                    String key = byTxHash // only with key: row, key_columns: [tx_hash]
                            ? hex(row.get("tx_hash"))
                            : batchId + "/" + ((GenericRecord) event.get("source")).get("row");
                    return KeyValue.pair(key, retraction ? null : row);
                })
                .toTable(Materialized.<String, GenericRecord, KeyValueStore<Bytes, byte[]>>as("transactions")
                        .withKeySerde(Serdes.String())
                        .withValueSerde(rows));
        // README: end
        return builder;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                usage("bad argument " + args[i]);
            }
            a.put(args[i].substring(2), args[i + 1]);
        }
        for (String req : List.of("bootstrap", "registry", "topic", "application-id")) {
            if (!a.containsKey(req)) {
                usage("missing --" + req);
            }
        }
        long timeoutSec = Long.parseLong(a.getOrDefault("timeout", "300"));
        Thread watchdog = new Thread(() -> {
            try {
                TimeUnit.SECONDS.sleep(timeoutSec);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("kstreams-table: timed out after " + timeoutSec + "s");
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();

        String topic = a.get("topic");
        String appId = a.get("application-id");
        Schema reader = a.containsKey("reader-schema")
                ? new Schema.Parser().parse(Files.readString(Path.of(a.get("reader-schema"))))
                : null;
        Serde<GenericRecord> events = new ConfluentAvroSerde(a.get("registry"), reader);
        Serde<GenericRecord> rows = reader == null ? events : new ConfluentAvroSerde(a.get("registry"), null);
        String keyBy = a.getOrDefault("key", "event");
        if (!keyBy.equals("event") && !keyBy.equals("tx_hash")) {
            usage("--key wants event or tx_hash, got " + keyBy);
        }
        boolean byTxHash = keyBy.equals("tx_hash");

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        if (a.containsKey("state-dir")) {
            props.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state-dir"));
        }

        long t0 = System.nanoTime();
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap")))) {
            Map<TopicPartition, Long> inputEnd = committedEnds(admin, Set.of(topic));
            try (KafkaStreams streams = new KafkaStreams(topology(topic, events, rows, byTxHash).build(), props)) {
                Throwable[] failure = new Throwable[1];
                streams.setUncaughtExceptionHandler(e -> {
                    failure[0] = e;
                    return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                            .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
                });
                streams.start();
                waitCaughtUp(admin, appId, topic, inputEnd, streams, failure);
                ReadOnlyKeyValueStore<String, GenericRecord> store = streams.store(
                        StoreQueryParameters.fromNameAndType(STORE, QueryableStoreTypes.keyValueStore()));
                List<String> lines = new ArrayList<>();
                try (KeyValueIterator<String, GenericRecord> it = store.all()) {
                    it.forEachRemaining(kv -> lines.add(json(kv.value)));
                }
                lines.sort(null);
                PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
                lines.forEach(out::println);
                out.flush();
                long records = inputEnd.values().stream().mapToLong(Long::longValue).sum();
                System.err.printf("kstreams-table summary: {\"topic\":%s,\"application_id\":%s,\"input_end_offsets\":%d,"
                                + "\"rows\":%d,\"seconds\":%.1f}%n",
                        jsonString(topic), jsonString(appId), records, lines.size(), (System.nanoTime() - t0) / 1e9);
                streams.close(Duration.ofSeconds(10));
            }
        }
        System.exit(0);
    }

    /** The read_committed end offsets (last stable offsets) of the topics' partitions. */
    static Map<TopicPartition, Long> committedEnds(Admin admin, Collection<String> topics) throws Exception {
        Map<String, TopicDescription> desc = admin.describeTopics(topics).allTopicNames().get();
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        desc.values().forEach(d -> d.partitions().forEach(p -> req.put(new TopicPartition(d.name(), p.partition()),
                OffsetSpec.latest())));
        return admin.listOffsets(req, new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).all().get()
                .entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset()));
    }

    /**
     * Waits until the application's committed offsets have reached inputEnd on the input topic and
     * the current end on its repartition topics: then every input record has gone through the
     * table, under exactly-once in the same transactions as those offsets.
     */
    static void waitCaughtUp(Admin admin, String appId, String topic, Map<TopicPartition, Long> inputEnd,
            KafkaStreams streams, Throwable[] failure) throws Exception {
        while (true) {
            if (failure[0] != null || streams.state() == KafkaStreams.State.ERROR
                    || streams.state() == KafkaStreams.State.PENDING_ERROR) {
                throw new IllegalStateException("Kafka Streams failed", failure[0]);
            }
            if (streams.state() == KafkaStreams.State.RUNNING) {
                Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(appId).partitionsToOffsetAndMetadata().get();
                Set<String> repartition = admin.listTopics().names().get().stream()
                        .filter(t -> t.startsWith(appId + "-") && t.endsWith("-repartition"))
                        .collect(Collectors.toSet());
                Map<TopicPartition, Long> ends = new HashMap<>(inputEnd);
                if (!repartition.isEmpty()) {
                    ends.putAll(committedEnds(admin, repartition));
                }
                boolean done = !repartition.isEmpty();
                for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
                    OffsetAndMetadata c = committed.get(e.getKey());
                    if (e.getValue() > 0 && (c == null || c.offset() < e.getValue())) {
                        done = false;
                    }
                }
                if (done) {
                    return;
                }
            }
            Thread.sleep(200);
        }
    }

    private static void usage(String msg) {
        System.err.println("kstreams-table: " + msg);
        System.err.println("usage: TransactionsTable --bootstrap HOST:PORT --registry URL --topic TOPIC"
                + " --application-id ID [--key event|tx_hash] [--state-dir DIR] [--reader-schema FILE] [--timeout SECONDS]");
        System.exit(2);
    }

    /** A byte string (Avro fixed or bytes) as "0x" + lowercase hex: the table's key for tx_hash. */
    static String hex(Object v) {
        byte[] bs;
        if (v instanceof GenericFixed) {
            bs = ((GenericFixed) v).bytes();
        } else if (v instanceof ByteBuffer) {
            ByteBuffer b = ((ByteBuffer) v).duplicate();
            bs = new byte[b.remaining()];
            b.get(bs);
        } else {
            return String.valueOf(v); // fixed_as: hex writes "0x..." strings
        }
        StringBuilder h = new StringBuilder("0x");
        for (byte x : bs) {
            h.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return h.toString();
    }

    /** A record as a JSON object with its fields in schema order. */
    static String json(GenericRecord r) {
        StringBuilder b = new StringBuilder();
        value(b, r);
        return b.toString();
    }

    private static void value(StringBuilder b, Object v) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof GenericFixed || v instanceof ByteBuffer) {
            b.append('"').append(hex(v)).append('"');
        } else if (v instanceof BigDecimal) {
            b.append(jsonString(((BigDecimal) v).toPlainString()));
        } else if (v instanceof Number || v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof GenericRecord) {
            GenericRecord r = (GenericRecord) v;
            b.append('{');
            for (Schema.Field f : r.getSchema().getFields()) {
                b.append(f.pos() > 0 ? "," : "").append(jsonString(f.name())).append(':');
                value(b, r.get(f.pos()));
            }
            b.append('}');
        } else if (v instanceof Collection) {
            b.append('[');
            String sep = "";
            for (Object x : (Collection<?>) v) {
                b.append(sep);
                value(b, x);
                sep = ",";
            }
            b.append(']');
        } else if (v instanceof Map) {
            b.append('{');
            String sep = "";
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                b.append(sep).append(jsonString(e.getKey().toString())).append(':');
                value(b, e.getValue());
                sep = ",";
            }
            b.append('}');
        } else {
            b.append(jsonString(v.toString())); // strings (Utf8), enums
        }
    }

    static String jsonString(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
