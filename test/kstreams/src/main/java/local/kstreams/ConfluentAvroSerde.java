package local.kstreams;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.avro.Conversions;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DatumReader;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serializer;

/**
 * A Serde for Avro records in the Confluent wire format (magic byte 0, the schema id as 4 bytes
 * big-endian, then Avro binary), with a Confluent-compatible schema registry: what Confluent's
 * {@code GenericAvroSerde} does, in a page, for where kafka-avro-serializer is not available.
 *
 * <p>Reading fetches each writer schema once by id ({@code GET /schemas/ids/{id}}) and decodes
 * with a {@link GenericDatumReader}, resolved to the reader schema when one is given. Decimals
 * decode as {@link java.math.BigDecimal}; other logical types (timestamp-nanos, ...) as their
 * Avro base type. A null (a tombstone) reads as null. Writing (for Kafka Streams' repartition and
 * changelog topics) registers the record's schema under {@code <topic>-value} ({@code <topic>-key}
 * for keys), as GenericAvroSerde does with auto.register.schemas.
 *
 * <p>Configure it with {@code schema.registry.url}, like Confluent's, or construct it with the
 * URL.
 */
public final class ConfluentAvroSerde implements Serde<GenericRecord> {
    public static final String REGISTRY_URL_CONFIG = "schema.registry.url";

    private static final byte MAGIC = 0;
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final GenericData DATA = new GenericData();

    static {
        DATA.addLogicalTypeConversion(new Conversions.DecimalConversion());
    }

    private final HttpClient http = HttpClient.newHttpClient();
    private final Map<Integer, DatumReader<GenericRecord>> readers = new ConcurrentHashMap<>();
    private final Map<String, Integer> registered = new ConcurrentHashMap<>();
    private final Schema readerSchema;
    private String url;
    private boolean isKey;

    /** A Serde to be configured with schema.registry.url. */
    public ConfluentAvroSerde() {
        this(null, null);
    }

    /**
     * A Serde for the registry at url; readerSchema, when not null, is the schema every record is
     * resolved to (Avro schema resolution), whatever schema it was written with.
     */
    public ConfluentAvroSerde(String url, Schema readerSchema) {
        this.url = url == null ? null : url.replaceAll("/+$", "");
        this.readerSchema = readerSchema;
    }

    @Override
    public void configure(Map<String, ?> configs, boolean isKey) {
        Object u = configs.get(REGISTRY_URL_CONFIG);
        if (u != null) {
            this.url = u.toString().replaceAll("/+$", "");
        }
        this.isKey = isKey;
    }

    @Override
    public Serializer<GenericRecord> serializer() {
        return this::serialize;
    }

    @Override
    public Deserializer<GenericRecord> deserializer() {
        return this::deserialize;
    }

    private GenericRecord deserialize(String topic, byte[] data) {
        if (data == null) {
            return null;
        }
        ByteBuffer buf = ByteBuffer.wrap(data);
        if (data.length < 5 || buf.get() != MAGIC) {
            throw new SerializationException("not the Confluent wire format (magic byte 0) in " + topic);
        }
        int id = buf.getInt();
        DatumReader<GenericRecord> reader = readers.computeIfAbsent(id, this::newReader);
        try {
            return reader.read(null, DecoderFactory.get().binaryDecoder(data, 5, data.length - 5, null));
        } catch (IOException | RuntimeException e) {
            throw new SerializationException("decoding a record of schema id " + id + " in " + topic, e);
        }
    }

    private DatumReader<GenericRecord> newReader(int id) {
        Schema writer = new Schema.Parser().parse(request("GET", "/schemas/ids/" + id, null).get("schema").asText());
        return new GenericDatumReader<>(writer, readerSchema != null ? readerSchema : writer, DATA);
    }

    private byte[] serialize(String topic, GenericRecord record) {
        if (record == null) {
            return null;
        }
        Schema schema = record.getSchema();
        String subject = topic + (isKey ? "-key" : "-value");
        int id = registered.computeIfAbsent(subject + "\n" + schema, k -> register(subject, schema));
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(MAGIC);
        out.writeBytes(ByteBuffer.allocate(4).putInt(id).array());
        try {
            BinaryEncoder enc = EncoderFactory.get().directBinaryEncoder(out, null);
            new GenericDatumWriter<GenericRecord>(schema, DATA).write(record, enc);
            enc.flush();
        } catch (IOException | RuntimeException e) {
            throw new SerializationException("encoding a record for " + topic, e);
        }
        return out.toByteArray();
    }

    private int register(String subject, Schema schema) {
        String body = JSON.createObjectNode().put("schema", schema.toString()).toString();
        String path = "/subjects/" + URLEncoder.encode(subject, StandardCharsets.UTF_8) + "/versions";
        return request("POST", path, body).get("id").asInt();
    }

    private JsonNode request(String method, String path, String body) {
        if (url == null) {
            throw new IllegalStateException(REGISTRY_URL_CONFIG + " is not configured");
        }
        HttpRequest.Builder req = HttpRequest.newBuilder(URI.create(url + path))
                .header("Accept", "application/vnd.schemaregistry.v1+json");
        if (body != null) {
            req.header("Content-Type", "application/vnd.schemaregistry.v1+json")
                    .method(method, HttpRequest.BodyPublishers.ofString(body));
        }
        try {
            HttpResponse<String> resp = http.send(req.build(), HttpResponse.BodyHandlers.ofString());
            if (resp.statusCode() != 200) {
                throw new SerializationException(
                        method + " " + url + path + ": HTTP " + resp.statusCode() + ": " + resp.body());
            }
            return JSON.readTree(resp.body());
        } catch (IOException e) {
            throw new UncheckedIOException(method + " " + url + path, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SerializationException("interrupted: " + method + " " + url + path, e);
        }
    }
}
