package local.flinkcheck;

import java.io.PrintStream;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.catalog.Column;
import org.apache.flink.table.catalog.ResolvedSchema;
import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;
import org.apache.flink.util.CloseableIterator;

/**
 * Reads one data topic of amp-kafka-bridge with Flink SQL in an embedded MiniCluster, using a
 * table definition from a file (the README's), and prints the materialised table.
 *
 * <p>The DDL file is executed as it is; the connection options it names (topic, brokers,
 * registry) are replaced for the run with SQL hints, together with {@code 'scan.bounded.mode' =
 * 'latest-offset'} so that the streaming job ends at the offsets the topic had when it started.
 * The changelog that {@code SELECT *} produces (+I, -U, +U, -D) is applied to a multiset of whole
 * rows: a retraction must carry exactly the row it retracts.
 *
 * <p>Output: one JSON object per surviving row on stdout, sorted; on stderr a line {@code
 * flink-changelog summary: {...}} with the counts of each change kind, the retractions that found
 * no row ("dangling") and the number of rows. Exit code 0 on success, 1 when the job failed
 * (Flink's error on stderr), 2 on bad arguments, 3 on timeout.
 *
 * <p>Arguments: {@code --ddl FILE --bootstrap HOST:PORT --registry URL --topic TOPIC [--timeout
 * SECONDS] [--option KEY=VALUE ...]}; each --option adds a hint (e.g. a property).
 */
public final class FlinkChangelog {
    private FlinkChangelog() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new LinkedHashMap<>();
        Map<String, String> extra = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            String k = args[i];
            if (!k.startsWith("--") || i + 1 >= args.length) {
                usage("bad argument " + k);
            }
            String v = args[++i];
            if (k.equals("--option")) {
                int eq = v.indexOf('=');
                if (eq <= 0) {
                    usage("--option wants KEY=VALUE, got " + v);
                }
                extra.put(v.substring(0, eq), v.substring(eq + 1));
            } else {
                a.put(k.substring(2), v);
            }
        }
        for (String req : List.of("ddl", "bootstrap", "registry", "topic")) {
            if (!a.containsKey(req)) {
                usage("missing --" + req);
            }
        }
        long timeoutSec = Long.parseLong(a.getOrDefault("timeout", "300"));
        Thread watchdog =
                new Thread(
                        () -> {
                            try {
                                TimeUnit.SECONDS.sleep(timeoutSec);
                            } catch (InterruptedException e) {
                                return;
                            }
                            System.err.println("flink-changelog: timed out after " + timeoutSec + "s");
                            Runtime.getRuntime().halt(3);
                        },
                        "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();

        String ddl = Files.readString(Path.of(a.get("ddl")), StandardCharsets.UTF_8).trim();
        if (ddl.endsWith(";")) {
            ddl = ddl.substring(0, ddl.length() - 1);
        }

        Map<String, String> hints = new LinkedHashMap<>();
        hints.put("topic", a.get("topic"));
        hints.put("properties.bootstrap.servers", a.get("bootstrap"));
        hints.put("debezium-avro-confluent.url", a.get("registry"));
        hints.put("scan.bounded.mode", "latest-offset");
        hints.putAll(extra);

        long t0 = System.nanoTime();
        TableEnvironment tEnv = TableEnvironment.create(EnvironmentSettings.inStreamingMode());
        tEnv.getConfig().set("parallelism.default", "1");
        tEnv.executeSql(ddl);
        String[] tables = tEnv.listTables();
        if (tables.length != 1) {
            usage("the DDL file must create exactly one table, it created " + tables.length);
        }
        StringBuilder q = new StringBuilder("SELECT * FROM `").append(tables[0]).append("` /*+ OPTIONS(");
        String sep = "";
        for (Map.Entry<String, String> e : hints.entrySet()) {
            q.append(sep).append(sqlString(e.getKey())).append('=').append(sqlString(e.getValue()));
            sep = ", ";
        }
        q.append(") */");

        Map<String, Integer> counts = new TreeMap<>();
        for (RowKind k : RowKind.values()) {
            counts.put(k.shortString(), 0);
        }
        Map<String, Integer> table = new TreeMap<>();
        int dangling = 0;
        List<String> names = new ArrayList<>();
        TableResult result = tEnv.executeSql(q.toString());
        ResolvedSchema schema = result.getResolvedSchema();
        for (Column c : schema.getColumns()) {
            names.add(c.getName());
        }
        try (CloseableIterator<Row> it = result.collect()) {
            while (it.hasNext()) {
                Row row = it.next();
                RowKind kind = row.getKind();
                counts.merge(kind.shortString(), 1, Integer::sum);
                String json = rowJson(names, row);
                switch (kind) {
                    case INSERT:
                    case UPDATE_AFTER:
                        table.merge(json, 1, Integer::sum);
                        break;
                    default:
                        Integer n = table.get(json);
                        if (n == null) {
                            dangling++;
                        } else if (n == 1) {
                            table.remove(json);
                        } else {
                            table.put(json, n - 1);
                        }
                }
            }
        }
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        int rows = 0;
        for (Map.Entry<String, Integer> e : table.entrySet()) {
            for (int i = 0; i < e.getValue(); i++) {
                out.println(e.getKey());
                rows++;
            }
        }
        out.flush();
        StringBuilder s = new StringBuilder("{");
        s.append("\"table\":").append(jsonString(tables[0]));
        s.append(",\"query\":").append(jsonString(q.toString()));
        s.append(",\"columns\":[");
        for (int i = 0; i < names.size(); i++) {
            s.append(i > 0 ? "," : "").append(jsonString(names.get(i)));
        }
        s.append(']');
        s.append(",\"changes\":{");
        sep = "";
        for (Map.Entry<String, Integer> e : counts.entrySet()) {
            s.append(sep).append(jsonString(e.getKey())).append(':').append(e.getValue());
            sep = ",";
        }
        s.append("},\"dangling\":").append(dangling);
        s.append(",\"rows\":").append(rows);
        s.append(",\"seconds\":").append(String.format("%.1f", (System.nanoTime() - t0) / 1e9));
        s.append('}');
        System.err.println("flink-changelog summary: " + s);
        System.exit(0);
    }

    private static void usage(String msg) {
        System.err.println("flink-changelog: " + msg);
        System.err.println(
                "usage: FlinkChangelog --ddl FILE --bootstrap HOST:PORT --registry URL --topic TOPIC"
                        + " [--timeout SECONDS] [--option KEY=VALUE ...]");
        System.exit(2);
    }

    private static String sqlString(String s) {
        return "'" + s.replace("'", "''") + "'";
    }

    /** Renders a row as a JSON object with the columns in table order. */
    static String rowJson(List<String> names, Row row) {
        StringBuilder b = new StringBuilder("{");
        for (int i = 0; i < row.getArity(); i++) {
            if (i > 0) {
                b.append(',');
            }
            b.append(jsonString(i < names.size() ? names.get(i) : "f" + i)).append(':');
            value(b, row.getField(i));
        }
        return b.append('}').toString();
    }

    /**
     * Appends a value as JSON: bytes as "0x" + lowercase hex, decimals as plain strings,
     * integers and booleans as literals, nested rows as arrays of their fields, everything else
     * as its string form.
     */
    private static void value(StringBuilder b, Object v) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof byte[]) {
            byte[] bs = (byte[]) v;
            StringBuilder h = new StringBuilder("0x");
            for (byte x : bs) {
                h.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
            }
            b.append(jsonString(h.toString()));
        } else if (v instanceof BigDecimal) {
            b.append(jsonString(((BigDecimal) v).toPlainString()));
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) {
            b.append(v);
        } else if (v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof Row) {
            Row r = (Row) v;
            b.append('[');
            for (int i = 0; i < r.getArity(); i++) {
                if (i > 0) {
                    b.append(',');
                }
                value(b, r.getField(i));
            }
            b.append(']');
        } else if (v instanceof Object[]) {
            Object[] arr = (Object[]) v;
            b.append('[');
            for (int i = 0; i < arr.length; i++) {
                if (i > 0) {
                    b.append(',');
                }
                value(b, arr[i]);
            }
            b.append(']');
        } else {
            b.append(jsonString(v.toString()));
        }
    }

    static String jsonString(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    b.append("\\\"");
                    break;
                case '\\':
                    b.append("\\\\");
                    break;
                case '\n':
                    b.append("\\n");
                    break;
                case '\r':
                    b.append("\\r");
                    break;
                case '\t':
                    b.append("\\t");
                    break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }
}
