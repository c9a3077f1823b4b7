#!/usr/bin/env bash
# Local test stack without Docker: a real Apache Kafka broker (KRaft, jars from
# Maven Central), a real redis-server (Debian package, AOF fsync always), a
# Confluent-compatible schema registry that enforces compatibility (Apicurio
# Registry from Maven Central; REGISTRY_KIND=srfake for franz-go's srfake
# served by cmd/devstack) and a Python venv with independent readers (pyarrow, fastavro, confluent-kafka).
#
#   deploy/local/stack.sh start  [kafka|redis|registry|python|tools|flink|kstreams ...]   (default: all)
#   deploy/local/stack.sh start  kafka-secure   (opt-in: a broker with TLS, mTLS, SASL and ACLs; see below)
#   deploy/local/stack.sh start  bench    what `make bench` needs, nothing started (not in the default list)
#   deploy/local/stack.sh stop   [kafka|redis|registry|kafka-secure ...]   (KEEP=1 keeps data)
#   deploy/local/stack.sh status
#   deploy/local/stack.sh env          print the env file
#
# Every service listens on a free port of 127.0.0.1. State lives in .local/ at the
# repository root (override with BRIDGE_LOCAL_DIR): stack/<service>/ holds pid,
# config, log and data; stack.env holds the addresses for the tests. Caches that
# survive stop: kafka-libs/ (broker jars), registry-dist/ (Apicurio), venv/ (Python), bin/devstack,
# flink/ (the Flink SQL job of test/flink and its jars), kstreams/ (the Kafka Streams
# application of test/kstreams and its jars).
# Starting twice is harmless; stop ends exactly the processes start recorded.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/deploy/local"
LOCAL="${BRIDGE_LOCAL_DIR:-$ROOT/.local}"
STATE="$LOCAL/stack"
ENV_FILE="$LOCAL/stack.env"
DEVSTACK="$LOCAL/bin/devstack"
VENV="$LOCAL/venv"
KAFKA_READY_TIMEOUT="${KAFKA_READY_TIMEOUT:-90s}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"

log() { printf '[stack] %s\n' "$*" >&2; }
die() { printf '[stack] error: %s\n' "$*" >&2; exit 1; }
now_ms() { date +%s%3N; }
since() { local s=$1; echo "$(( $(now_ms) - s ))ms"; }

# --- helpers ---------------------------------------------------------------

# alive PID PATTERN: the process exists and its command line contains PATTERN
# (guards against a recycled pid).
alive() {
  local pid=$1 pattern=$2
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$pattern"
}

read_pid() { if [[ -s "$1" ]]; then tr -dc '0-9' <"$1"; fi; }

# stop_pid NAME PIDFILE PATTERN GRACE_SECONDS: TERM, wait, then KILL.
stop_pid() {
  local name=$1 pidfile=$2 pattern=$3 grace=$4 pid
  pid=$(read_pid "$pidfile")
  if ! alive "$pid" "$pattern"; then
    if [[ -n "$pid" ]]; then log "$name: pid $pid not running"; fi
    rm -f "$pidfile"
    return 0
  fi
  local t0; t0=$(now_ms)
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$(( $(date +%s) + grace ))
  while alive "$pid" "$pattern" && (( $(date +%s) < deadline )); do sleep 0.1; done
  if alive "$pid" "$pattern"; then
    log "$name: pid $pid still running after ${grace}s, sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    while alive "$pid" "$pattern"; do sleep 0.1; done
  fi
  rm -f "$pidfile"
  log "$name: stopped pid $pid in $(since "$t0")"
}

apt_install() {
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "need root (or sudo) to apt-get install $*"
    local SUDO=sudo
  else
    local SUDO=
  fi
  command -v apt-get >/dev/null || die "apt-get not found: install $* yourself"
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists only when the packages are not known yet.
  local pkg need_update=0
  local policy aptlog="$LOCAL/apt.log"
  mkdir -p "$LOCAL"
  for pkg in "$@"; do
    policy=$(apt-cache policy "$pkg" 2>/dev/null || true)
    if [[ "$policy" != *"Candidate: "[0-9]* ]]; then need_update=1; fi
  done
  if (( need_update )); then
    log "apt-get update"
    $SUDO apt-get update -qq -o DPkg::Lock::Timeout=120 >>"$aptlog" 2>&1 || { tail -20 "$aptlog" >&2; die "apt-get update failed (log: $aptlog)"; }
  fi
  local t0; t0=$(now_ms)
  $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends "$@" >>"$aptlog" 2>&1 ||
    { tail -20 "$aptlog" >&2; die "apt-get install $* failed (log: $aptlog)"; }
  log "apt-get install -y $*: done in $(since "$t0")"
}

need_cmd() { # need_cmd COMMAND DEBIAN_PACKAGE
  command -v "$1" >/dev/null || apt_install "$2"
  command -v "$1" >/dev/null || die "$1 still missing after installing $2"
}

build_devstack() {
  command -v go >/dev/null || die "go not found on PATH (Go 1.26+ is needed)"
  mkdir -p "$(dirname "$DEVSTACK")"
  (cd "$ROOT" && go build -o "$DEVSTACK" ./cmd/devstack) || die "building cmd/devstack"
}

freeports() { "$DEVSTACK" freeport -n "$1"; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_env() {
  mkdir -p "$LOCAL"
  local tmp="$ENV_FILE.tmp" f
  {
    echo "# Written by deploy/local/stack.sh; source with: set -a; . $ENV_FILE; set +a"
    for f in "$STATE"/kafka/env "$STATE"/kafka-secure/env "$STATE"/redis/env "$STATE"/registry/env "$LOCAL"/venv.env "$LOCAL"/tools.env; do
      if [[ -s "$f" ]]; then cat "$f"; fi
    done
  } >"$tmp"
  mv "$tmp" "$ENV_FILE"
}

# --- kafka -----------------------------------------------------------------

kafka_version() { sed -n 's/.*<kafka.version>\(.*\)<\/kafka.version>.*/\1/p' "$HERE/kafka/pom.xml"; }

# kafka_jars: resolve the broker classpath with mvn into a cache keyed by the
# pom's hash; skip mvn when that cache is complete.
kafka_jars() {
  local sum dir
  sum=$(sha256sum "$HERE/kafka/pom.xml" | cut -c1-12)
  dir="$LOCAL/kafka-libs/$(kafka_version)-$sum"
  if [[ -f "$dir/.complete" ]]; then
    KAFKA_LIBS="$dir"
    return 0
  fi
  need_cmd java openjdk-17-jre-headless
  need_cmd mvn maven
  local t0; t0=$(now_ms)
  log "kafka: resolving broker jars with mvn (Maven Central) into $dir"
  rm -rf "$dir.tmp"
  mkdir -p "$LOCAL"
  if ! mvn -B -q -Dstyle.color=never -f "$HERE/kafka/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$dir.tmp" >"$LOCAL/mvn.log" 2>&1; then
    tail -30 "$LOCAL/mvn.log" >&2
    die "mvn could not resolve the broker jars (log: $LOCAL/mvn.log)"
  fi
  ls "$dir.tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || die "mvn resolved no kafka_2.13 jar into $dir.tmp"
  rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.complete"
  log "kafka: jars resolved in $(since "$t0") ($(du -sh "$dir" | cut -f1))"
  KAFKA_LIBS="$dir"
}

kafka_jvm_opts() {
  local d=$1
  # shellcheck disable=SC2206
  JVM_OPTS=($KAFKA_HEAP_OPTS -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15
    -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$HERE/kafka/log4j2.properties" "-Dkafka.logs.dir=$d/logs"
    "-Djava.io.tmpdir=$d/tmp" "-DZstdTempFolder=$d/tmp" "-Dorg.xerial.snappy.tempdir=$d/tmp")
}

start_kafka() {
  local d="$STATE/kafka" pid
  pid=$(read_pid "$d/kafka.pid")
  if alive "$pid" kafka.Kafka; then
    log "kafka: already running (pid $pid) at $(sed -n 's/^BRIDGE_TEST_KAFKA_SEEDS=//p' "$d/env")"
    return 0
  fi
  need_cmd java openjdk-17-jre-headless
  kafka_jars
  mkdir -p "$d/data" "$d/logs" "$d/tmp"
  local port cport
  if [[ -s "$d/ports" ]]; then read -r port cport <"$d/ports"; fi
  if [[ -z "${port:-}" ]] || ! port_free "$port" || ! port_free "$cport"; then
    local ports
    mapfile -t ports < <(freeports 2)
    port=${ports[0]} cport=${ports[1]}
    echo "$port $cport" >"$d/ports"
  fi
  cat >"$d/server.properties" <<EOF
# Single-node KRaft (combined broker+controller) for tests; written by deploy/local/stack.sh.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$d/data
num.network.threads=2
num.io.threads=2
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# A restarted (killed) broker must wait out its old session before it re-registers:
# 3 s instead of 9 s.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
EOF
  kafka_jvm_opts "$d"
  local cp="$KAFKA_LIBS/*" t0
  t0=$(now_ms)
  if [[ ! -f "$d/data/meta.properties" ]]; then
    # A cluster id as StorageTool random-uuid makes it (16 random bytes, base64url
    # without padding, not starting with '-'), without a second JVM start.
    local id=-
    while [[ $id == -* ]]; do id=$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '='); done
    java "${JVM_OPTS[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$d/server.properties" \
      --ignore-formatted >>"$d/logs/format.log" 2>&1 ||
      die "kafka: StorageTool format failed: $(tail -20 "$d/logs/format.log")"
    log "kafka: formatted $d/data (cluster id $id) in $(since "$t0")"
  fi
  t0=$(now_ms)
  setsid java "${JVM_OPTS[@]}" -cp "$cp" kafka.Kafka "$d/server.properties" \
    </dev/null >>"$d/logs/kafka.log" 2>&1 &
  pid=$!
  echo "$pid" >"$d/kafka.pid"
  local ready
  if ! ready=$("$DEVSTACK" kafka-ready -brokers "127.0.0.1:$port" -timeout "$KAFKA_READY_TIMEOUT"); then
    log "kafka: not ready; last log lines:"
    tail -30 "$d/logs/kafka.log" >&2 || true
    stop_pid kafka "$d/kafka.pid" kafka.Kafka 10
    die "kafka broker did not become ready within $KAFKA_READY_TIMEOUT"
  fi
  local jar version
  local jars=("$KAFKA_LIBS"/kafka_2.13-*.jar)
  jar=$(basename "${jars[0]}")
  version=${jar#kafka_2.13-}
  version=${version%.jar}
  cat >"$d/env" <<EOF
BRIDGE_TEST_KAFKA_SEEDS=127.0.0.1:$port
BRIDGE_TEST_KAFKA_HOME=$KAFKA_LIBS
BRIDGE_TEST_KAFKA_VERSION=$version
BRIDGE_TEST_KAFKA_PID_FILE=$d/kafka.pid
BRIDGE_TEST_KAFKA_CONFIG=$d/server.properties
EOF
  log "kafka: Apache Kafka $version ($jar) pid $pid on 127.0.0.1:$port, ready in $(since "$t0"): $ready"
}

stop_kafka() {
  stop_pid kafka "$STATE/kafka/kafka.pid" kafka.Kafka 30
  rm -f "$STATE/kafka/env"
  if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$STATE/kafka"; fi
}

# --- kafka-secure ----------------------------------------------------------
#
# Opt-in (not in the default list): a second broker, of the same jars, whose
# client listeners need TLS (TLS: principal User:ANONYMOUS), mutual TLS
# (MTLS: principal User:CN=bridge) and SASL over TLS (SASL: SCRAM-SHA-512 or
# PLAIN, principal User:bridge), with KRaft's StandardAuthorizer
# (allow.everyone.if.no.acl.found=false). The controller and inter-broker
# listeners take SASL PLAIN as the super user "admin", so that no client
# principal is one. A throwaway CA and certificates (devstack pki, valid for a
# day) are made at every start; the SCRAM user bridge is added at format
# time; once the broker is ready, devstack kafka-acls grants the three
# principals the bridge's ACLs (sink.TopicOps on the topics prefixed "amp",
# Write on the transactional ids prefixed "amp-kafka-bridge.").

# pem_inline FILE: the PEM as one properties value ("\n" escapes).
pem_inline() { awk 'NR > 1 { printf "\\n" } { printf "%s", $0 }' "$1"; }

# secret FILE: a random password kept in FILE (made once, mode 600).
secret() {
  if [[ ! -s "$1" ]]; then (umask 077 && head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$1"); fi
  cat "$1"
}

start_kafka_secure() {
  local d="$STATE/kafka-secure" pid
  pid=$(read_pid "$d/kafka.pid")
  if alive "$pid" "$d/server.properties"; then
    log "kafka-secure: already running (pid $pid) at $(sed -n 's/^BRIDGE_TEST_KAFKA_SECURE_SASL_SEEDS=//p' "$d/env")"
    return 0
  fi
  need_cmd java openjdk-17-jre-headless
  kafka_jars
  mkdir -p "$d/data" "$d/logs" "$d/tmp"
  local tls mtls sasl cport iport ports
  if [[ -s "$d/ports" ]]; then read -r tls mtls sasl cport iport <"$d/ports"; fi
  if [[ -z "${iport:-}" ]] || ! port_free "$tls" || ! port_free "$mtls" || ! port_free "$sasl" ||
    ! port_free "$cport" || ! port_free "$iport"; then
    mapfile -t ports < <(freeports 5)
    tls=${ports[0]} mtls=${ports[1]} sasl=${ports[2]} cport=${ports[3]} iport=${ports[4]}
    echo "$tls $mtls $sasl $cport $iport" >"$d/ports"
  fi
  rm -rf "$d/tls"
  "$DEVSTACK" pki -dir "$d/tls" >/dev/null || die "kafka-secure: writing the throwaway PKI"
  local admin_pw bridge_pw
  admin_pw=$(secret "$d/admin.password")
  bridge_pw=$(secret "$d/bridge.password")
  local admin_jaas
  admin_jaas="org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"$admin_pw\" user_admin=\"$admin_pw\";"
  (
    umask 077
    cat <<EOF
# Single-node KRaft broker with secured client listeners and the
# StandardAuthorizer; written by deploy/local/stack.sh (start kafka-secure).
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=TLS://127.0.0.1:$tls,MTLS://127.0.0.1:$mtls,SASL://127.0.0.1:$sasl,CONTROLLER://127.0.0.1:$cport,INTERNAL://127.0.0.1:$iport
advertised.listeners=TLS://127.0.0.1:$tls,MTLS://127.0.0.1:$mtls,SASL://127.0.0.1:$sasl,INTERNAL://127.0.0.1:$iport
controller.listener.names=CONTROLLER
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=TLS:SSL,MTLS:SSL,SASL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin
sasl.mechanism.controller.protocol=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=$admin_jaas
listener.name.internal.sasl.enabled.mechanisms=PLAIN
listener.name.internal.plain.sasl.jaas.config=$admin_jaas
listener.name.sasl.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_bridge="$bridge_pw";
listener.name.mtls.ssl.client.auth=required
listener.name.mtls.ssl.truststore.type=PEM
listener.name.mtls.ssl.truststore.certificates=$(pem_inline "$d/tls/ca.pem")
log.dirs=$d/data
num.network.threads=2
num.io.threads=2
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
EOF
    local l chain key
    chain=$(pem_inline "$d/tls/server.pem")
    key=$(pem_inline "$d/tls/server.key")
    for l in tls mtls sasl; do
      echo "listener.name.$l.ssl.keystore.type=PEM"
      echo "listener.name.$l.ssl.keystore.certificate.chain=$chain"
      echo "listener.name.$l.ssl.keystore.key=$key"
    done
  ) >"$d/server.properties"
  kafka_jvm_opts "$d"
  local cp="$KAFKA_LIBS/*" t0
  t0=$(now_ms)
  if [[ ! -f "$d/data/meta.properties" ]]; then
    local id=-
    while [[ $id == -* ]]; do id=$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '='); done
    java "${JVM_OPTS[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$d/server.properties" \
      --add-scram "SCRAM-SHA-512=[name=bridge,password=$bridge_pw]" --ignore-formatted >>"$d/logs/format.log" 2>&1 ||
      die "kafka-secure: StorageTool format failed: $(tail -20 "$d/logs/format.log")"
    log "kafka-secure: formatted $d/data (cluster id $id, SCRAM-SHA-512 user bridge) in $(since "$t0")"
  fi
  t0=$(now_ms)
  setsid java "${JVM_OPTS[@]}" -cp "$cp" kafka.Kafka "$d/server.properties" \
    </dev/null >>"$d/logs/kafka.log" 2>&1 &
  pid=$!
  echo "$pid" >"$d/kafka.pid"
  local admin=(-sasl-user admin -sasl-password-file "$d/admin.password")
  if ! "$DEVSTACK" kafka-ready -brokers "127.0.0.1:$iport" -timeout "$KAFKA_READY_TIMEOUT" "${admin[@]}" >/dev/null; then
    log "kafka-secure: not ready; last log lines:"
    tail -30 "$d/logs/kafka.log" >&2 || true
    stop_pid kafka-secure "$d/kafka.pid" "$d/server.properties" 10
    die "kafka-secure broker did not become ready within $KAFKA_READY_TIMEOUT"
  fi
  "$DEVSTACK" kafka-acls -brokers "127.0.0.1:$iport" "${admin[@]}" -principal User:bridge,User:CN=bridge,User:ANONYMOUS \
    -topic-prefix amp -txn-prefix amp-kafka-bridge. >"$d/acls.txt" || die "kafka-secure: granting the bridge's ACLs"
  cat >"$d/env" <<EOF
BRIDGE_TEST_KAFKA_SECURE_TLS_SEEDS=127.0.0.1:$tls
BRIDGE_TEST_KAFKA_SECURE_MTLS_SEEDS=127.0.0.1:$mtls
BRIDGE_TEST_KAFKA_SECURE_SASL_SEEDS=127.0.0.1:$sasl
BRIDGE_TEST_KAFKA_SECURE_CA_FILE=$d/tls/ca.pem
BRIDGE_TEST_KAFKA_SECURE_CLIENT_CERT_FILE=$d/tls/client.pem
BRIDGE_TEST_KAFKA_SECURE_CLIENT_KEY_FILE=$d/tls/client.key
BRIDGE_TEST_KAFKA_SECURE_SASL_USERNAME=bridge
BRIDGE_TEST_KAFKA_SECURE_SASL_PASSWORD_FILE=$d/bridge.password
BRIDGE_TEST_KAFKA_SECURE_ADMIN_SEEDS=127.0.0.1:$iport
BRIDGE_TEST_KAFKA_SECURE_ADMIN_PASSWORD_FILE=$d/admin.password
BRIDGE_TEST_KAFKA_SECURE_PID_FILE=$d/kafka.pid
EOF
  log "kafka-secure: pid $pid; TLS 127.0.0.1:$tls, mutual TLS 127.0.0.1:$mtls, SCRAM-SHA-512/PLAIN over TLS 127.0.0.1:$sasl; ready with the bridge's ACLs ($d/acls.txt) in $(since "$t0")"
}

stop_kafka_secure() {
  stop_pid kafka-secure "$STATE/kafka-secure/kafka.pid" "$STATE/kafka-secure/server.properties" 30
  rm -f "$STATE/kafka-secure/env"
  if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$STATE/kafka-secure"; fi
}

# --- redis -----------------------------------------------------------------

start_redis() {
  local d="$STATE/redis" pid
  pid=$(read_pid "$d/redis.pid")
  if alive "$pid" redis-server; then
    log "redis: already running (pid $pid) at $(sed -n 's/^BRIDGE_TEST_REDIS_ADDR=//p' "$d/env")"
    return 0
  fi
  need_cmd redis-server redis-server
  command -v redis-cli >/dev/null || apt_install redis-tools
  mkdir -p "$d/data"
  local port t0 bin
  bin=$(command -v redis-server)
  port=$(freeports 1)
  t0=$(now_ms)
  rm -f "$d/redis.pid"
  redis-server --port "$port" --bind 127.0.0.1 --protected-mode no --dir "$d/data" \
    --appendonly yes --appendfsync always --save "" \
    --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log" ||
    die "redis-server did not start: $(tail -5 "$d/redis.log" 2>/dev/null)"
  local deadline=$(( $(date +%s) + 20 ))
  until [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; do
    (( $(date +%s) < deadline )) || die "redis-server on $port did not answer PING in 20s: $(tail -5 "$d/redis.log")"
    sleep 0.05
  done
  pid=$(read_pid "$d/redis.pid")
  local version
  version=$(redis-cli -h 127.0.0.1 -p "$port" info server | sed -n 's/^redis_version:\([^[:space:]]*\).*/\1/p')
  cat >"$d/env" <<EOF
BRIDGE_TEST_REDIS_ADDR=127.0.0.1:$port
BRIDGE_TEST_REDIS_SERVER_BIN=$bin
BRIDGE_TEST_REDIS_VERSION=$version
EOF
  log "redis: redis-server $version pid $pid on 127.0.0.1:$port (appendonly yes, appendfsync always), PONG in $(since "$t0")"
}

stop_redis() {
  stop_pid redis "$STATE/redis/redis.pid" redis-server 15
  rm -f "$STATE/redis/env"
  if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$STATE/redis"; fi
}

# --- registry --------------------------------------------------------------

# The registry is Apicurio Registry (Maven Central: the app's Quarkus
# assembly, io.apicurio:apicurio-registry-app:VERSION:tar.gz:all, unpacked
# into .local/registry-dist/VERSION/), serving the Confluent REST API under
# /apis/ccompat/v7 and enforcing the compatibility level (global BACKWARD, as
# a Confluent registry by default). It needs Java 21 or newer (the machine's
# second JDK, or REGISTRY_JAVA). It starts in the background while the other
# services start (registry_launch) and is waited for at the end
# (registry_wait): its JVM takes 10-25 s on 2 busy cores. REGISTRY_KIND=srfake
# starts franz-go's srfake (cmd/devstack registry) instead: in memory, and
# its compatibility endpoint always says yes.
APICURIO_VERSION="${APICURIO_VERSION:-3.3.3}"
REGISTRY_KIND="${REGISTRY_KIND:-apicurio}"
REGISTRY_READY_TIMEOUT="${REGISTRY_READY_TIMEOUT:-120}"

# java_major JAVA: the major version of a java binary (0 if it does not run).
java_major() {
  local v
  v=$("$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
  echo "${v:-0}"
}

# registry_java: a java binary of version 21 or newer (REGISTRY_JAVA, then
# JAVA_HOME, the JDKs under /usr/lib/jvm, java on PATH; else Debian's
# openjdk-21 where the release has it).
registry_java() {
  local j
  for j in "${REGISTRY_JAVA:-}" "${JAVA_HOME:+$JAVA_HOME/bin/java}" /usr/lib/jvm/*/bin/java "$(command -v java 2>/dev/null)"; do
    [[ -n "$j" && -x "$j" ]] || continue
    if (( $(java_major "$j") >= 21 )); then echo "$j"; return 0; fi
  done
  if apt-cache policy openjdk-21-jre-headless 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    apt_install openjdk-21-jre-headless >&2
    for j in /usr/lib/jvm/*21*/bin/java; do [[ -x "$j" ]] && { echo "$j"; return 0; }; done
  fi
  return 1
}

# registry_dist: resolve Apicurio's assembly with mvn into a cache keyed by
# the version; skip mvn when that cache is complete.
registry_dist() {
  local dir="$LOCAL/registry-dist/$APICURIO_VERSION"
  if [[ -f "$dir/.complete" ]]; then REGISTRY_DIST="$dir"; return 0; fi
  need_cmd mvn maven
  local t0 art="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all"
  t0=$(now_ms)
  log "registry: resolving $art with mvn (Maven Central) into $dir"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  if ! mvn -B -q -Dstyle.color=never dependency:copy -Dartifact="$art" -DoutputDirectory="$dir.tmp" \
    >"$LOCAL/mvn-registry.log" 2>&1; then
    tail -30 "$LOCAL/mvn-registry.log" >&2
    die "mvn could not resolve $art (log: $LOCAL/mvn-registry.log)"
  fi
  tar xzf "$dir.tmp"/apicurio-registry-app-*-all.tar.gz -C "$dir.tmp" && rm -f "$dir.tmp"/*.tar.gz ||
    die "unpacking $art"
  [[ -f "$dir.tmp/quarkus-run.jar" ]] || die "$art has no quarkus-run.jar"
  rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.complete"
  log "registry: Apicurio Registry $APICURIO_VERSION resolved in $(since "$t0") ($(du -sh "$dir" | cut -f1))"
  REGISTRY_DIST="$dir"
}

# registry_alive: the recorded registry process runs.
registry_alive() {
  local pid
  pid=$(read_pid "$STATE/registry/registry.pid")
  alive "$pid" quarkus-run.jar || alive "$pid" "devstack registry"
}

# registry_launch starts the registry in the background; registry_wait
# waits for it and writes its env.
registry_launch() {
  local d="$STATE/registry" pid
  REGISTRY_LAUNCHED=0
  if registry_alive; then
    log "registry: already running (pid $(read_pid "$d/registry.pid")) at $(sed -n 's/^BRIDGE_TEST_REGISTRY_URL=//p' "$d/env")"
    return 0
  fi
  mkdir -p "$d"
  rm -f "$d/addr" "$d/env"
  REGISTRY_T0=$(now_ms)
  if [[ "$REGISTRY_KIND" == srfake ]]; then
    setsid "$DEVSTACK" registry -addr 127.0.0.1:0 -addr-file "$d/addr" </dev/null >>"$d/registry.log" 2>&1 &
    pid=$!
  else
    local java port
    java=$(registry_java) || die "registry: Apicurio Registry $APICURIO_VERSION needs Java 21 or newer; none found (set REGISTRY_JAVA, or REGISTRY_KIND=srfake for the in-memory fake)"
    need_cmd mvn maven
    local ports
    mapfile -t ports < <(freeports 2)
    port=${ports[0]}
    echo "127.0.0.1:$port/apis/ccompat/v7" >"$d/addr.pending"
    cat >"$d/application.properties" <<EOF
# Apicurio Registry for the local stack; written by deploy/local/stack.sh.
quarkus.http.host=127.0.0.1
quarkus.http.port=$port
# The management interface (health, metrics; built in) would take port 9000 on every address.
quarkus.management.host=127.0.0.1
quarkus.management.port=${ports[1]}
quarkus.http.access-log.enabled=false
quarkus.log.level=WARN
quarkus.log.category."io.quarkus.bootstrap".level=INFO
quarkus.log.console.json=false
# In-memory storage (H2), as srfake: nothing survives a stop.
apicurio.storage.kind=sql
apicurio.storage.sql.kind=h2
# A Confluent registry's default: a new version must read the previous one's data.
apicurio.rules.global.compatibility=BACKWARD
EOF
    # The download (a first start) and the JVM run in the background beside
    # the other services. C1 only: the JVM starts in about half the time, and
    # the tests' load is light.
    REGISTRY_DIST="$LOCAL/registry-dist/$APICURIO_VERSION"
    (registry_dist && cd "$REGISTRY_DIST" && exec setsid "$java" -Xms64m -Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
      -Djava.io.tmpdir="$d" -Dquarkus.config.locations="$d/application.properties" -jar quarkus-run.jar \
      </dev/null >>"$d/registry.log" 2>&1) &
    pid=$!
    REGISTRY_JAVA_BIN=$java
  fi
  echo "$pid" >"$d/registry.pid"
  REGISTRY_LAUNCHED=1
}

registry_wait() {
  local d="$STATE/registry" pid url
  (( ${REGISTRY_LAUNCHED:-0} )) || return 0
  pid=$(read_pid "$d/registry.pid")
  local deadline=$(( $(date +%s) + REGISTRY_READY_TIMEOUT ))
  while :; do
    if [[ -s "$d/addr.pending" ]]; then url="http://$(tr -d '\n' <"$d/addr.pending")"; elif [[ -s "$d/addr" ]]; then url="http://$(tr -d '\n' <"$d/addr")"; else url=; fi
    if [[ -n "$url" ]] && "$DEVSTACK" registry-ready -url "$url" 2>/dev/null; then break; fi
    # kill -0, not alive(): until the forked shell has exec'd, /proc/$pid/cmdline
    # is still this script's, and the pattern would report a starting registry as exited.
    kill -0 "$pid" 2>/dev/null || die "registry exited: $(tail -15 "$d/registry.log")"
    (( $(date +%s) < deadline )) || { tail -15 "$d/registry.log" >&2; die "registry did not answer in ${REGISTRY_READY_TIMEOUT}s (REGISTRY_READY_TIMEOUT)"; }
    sleep 0.1
  done
  if [[ "$REGISTRY_KIND" == srfake ]]; then
    cat >"$d/env" <<EOF
BRIDGE_TEST_REGISTRY_URL=$url
BRIDGE_TEST_REGISTRY_KIND=srfake
EOF
    log "registry: franz-go srfake (Confluent-compatible, in-memory, accepts every schema) pid $pid at $url, ready in $(since "$REGISTRY_T0")"
  else
    mv "$d/addr.pending" "$d/addr"
    cat >"$d/env" <<EOF
BRIDGE_TEST_REGISTRY_URL=$url
BRIDGE_TEST_REGISTRY_KIND=apicurio
BRIDGE_TEST_REGISTRY_VERSION=$APICURIO_VERSION
BRIDGE_TEST_REGISTRY_HOME=$REGISTRY_DIST
BRIDGE_TEST_REGISTRY_JAVA=$REGISTRY_JAVA_BIN
EOF
    log "registry: Apicurio Registry $APICURIO_VERSION (Confluent API, global compatibility BACKWARD, in-memory) pid $pid at $url, ready in $(since "$REGISTRY_T0")"
  fi
}

stop_registry() {
  local pid
  pid=$(read_pid "$STATE/registry/registry.pid")
  if alive "$pid" "devstack registry"; then
    stop_pid registry "$STATE/registry/registry.pid" "devstack registry" 10
  else
    stop_pid registry "$STATE/registry/registry.pid" quarkus-run.jar 20
  fi
  rm -f "$STATE/registry/env"
  if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$STATE/registry"; fi
}

# --- python ----------------------------------------------------------------

find_python() {
  local p
  for p in "${BRIDGE_PYTHON:-}" python3.11 "${PYENV_ROOT:-${HOME:-/root}/.pyenv}"/versions/3.11*/bin/python3.11 python3; do
    [[ -n "$p" ]] || continue
    p=$(command -v "$p" 2>/dev/null) || continue
    if "$p" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
      "$p" -c 'import sys; print(sys.executable)'
      return 0
    fi
  done
  return 1
}

start_python() {
  local req="$HERE/requirements.txt" stamp="$VENV/.bridge-stamp" py want t0
  py=$(find_python) || die "no Python >= 3.10 with venv found (set BRIDGE_PYTHON)"
  want="$(sha256sum "$req" | cut -c1-16) $("$py" -c 'import sys; print(sys.version.split()[0])')"
  if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    log "python: $VENV up to date ($want)"
  else
    t0=$(now_ms)
    log "python: creating $VENV with $py and installing $req"
    rm -rf "$VENV"
    "$py" -m venv "$VENV" || die "creating venv (Debian: apt-get install python3-venv)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2 ||
      die "pip could not install $req"
    echo "$want" >"$stamp"
    log "python: venv installed in $(since "$t0")"
  fi
  local versions
  versions=$("$VENV/bin/python" - <<'EOF'
import pyarrow, pyarrow.flight, fastavro, confluent_kafka
from confluent_kafka.schema_registry.avro import AvroDeserializer  # noqa: F401
print(f"pyarrow {pyarrow.__version__}, fastavro {fastavro.__version__}, confluent-kafka {confluent_kafka.__version__}")
EOF
  ) || die "the venv's packages do not import; remove $VENV and retry"
  cat >"$LOCAL/venv.env" <<EOF
BRIDGE_TEST_PYTHON=$VENV/bin/python
BRIDGE_TEST_PYTHON_VERSIONS="$versions"
EOF
  log "python: $VENV/bin/python ($versions)"
}

# --- tools -----------------------------------------------------------------

# start_tools installs command-line checkers the tests use (promtool, from
# Debian's prometheus package, checks the alert rules and dashboard queries
# in deploy/). Nothing is started.
start_tools() {
  need_cmd promtool prometheus
  # stunnel4 puts mutual TLS in front of the test registry (Apicurio's build
  # cannot require client certificates).
  need_cmd stunnel4 stunnel4
  local v sv
  v=$(promtool --version 2>&1 | head -1)
  sv=$(stunnel4 -version 2>&1 | sed -n 's/^\(stunnel [0-9.]*\).*/\1/p' | head -1)
  cat >"$LOCAL/tools.env" <<EOF
BRIDGE_TEST_PROMTOOL=$(command -v promtool)
BRIDGE_TEST_STUNNEL=$(command -v stunnel4)
EOF
  log "tools: $(command -v promtool) ($v), $(command -v stunnel4) (${sv:-stunnel ?})"
}

# --- bench -----------------------------------------------------------------

# start_bench installs what `make bench` needs and starts nothing: the broker
# jars (its brokers are private testenv ones), redis-server, and kcat from
# Debian (the peer producer). It writes .local/bench.env, which stack.env does
# not include: the integration pass never sees these variables.
start_bench() {
  need_cmd java openjdk-17-jre-headless
  kafka_jars
  need_cmd redis-server redis-server
  need_cmd kcat kcat
  local jars=("$KAFKA_LIBS"/kafka_2.13-*.jar) version kv
  version=$(basename "${jars[0]}")
  version=${version#kafka_2.13-}
  version=${version%.jar}
  kv=$(kcat -V 2>&1 | sed -n 's/.*librdkafka \([0-9][^ ]*\).*/\1/p' | head -1)
  cat >"$LOCAL/bench.env" <<EOF
BRIDGE_TEST_KAFKA_HOME=$KAFKA_LIBS
BRIDGE_TEST_KAFKA_VERSION=$version
BRIDGE_TEST_REDIS_SERVER_BIN=$(command -v redis-server)
BRIDGE_BENCH_KCAT=$(command -v kcat)
BRIDGE_BENCH_KCAT_VERSION="kcat $(dpkg-query -W -f '${Version}' kcat 2>/dev/null || echo '?'), librdkafka ${kv:-?}"
EOF
  log "bench: Apache Kafka $version jars, $(command -v redis-server), $(command -v kcat) (librdkafka ${kv:-?}); env in $LOCAL/bench.env"
}

# --- flink, kstreams -------------------------------------------------------

# build_java_test NAME WHAT NOUN installs what test/NAME needs (a JDK with
# javac, Maven) and builds its Java program, WHAT (NOUN in the log), with
# test/NAME/build.sh (deploy/local/mvnbuild.sh: jars from Maven Central,
# cached in .local/NAME/); nothing is started.
build_java_test() {
  local name=$1 what=$2 noun=$3 dir t0
  need_cmd javac openjdk-17-jdk-headless
  need_cmd mvn maven
  t0=$(now_ms)
  dir=$("$ROOT/test/$name/build.sh") || die "building $what (test/$name/build.sh)"
  log "$name: $noun and classpath in $dir, ready in $(since "$t0")"
}

# start_flink builds the Flink SQL job of test/flink.
start_flink() { build_java_test flink "the Flink job" job; }

# start_kstreams builds the Kafka Streams application of test/kstreams.
start_kstreams() { build_java_test kstreams "the Kafka Streams application" application; }

# --- commands --------------------------------------------------------------

services() { if (($# == 0)); then echo kafka redis registry python tools flink kstreams; else echo "$@"; fi; }

cmd_start() {
  local s
  mkdir -p "$STATE"
  build_devstack
  # The registry's JVM starts in the background beside the others.
  if [[ " $(services "$@") " == *" registry "* ]]; then registry_launch; fi
  for s in $(services "$@"); do
    case $s in
      kafka) start_kafka ;; redis) start_redis ;; registry) ;; python) start_python ;; tools) start_tools ;;
      bench) start_bench ;;
      flink) start_flink ;;
      kstreams) start_kstreams ;;
      kafka-secure) start_kafka_secure ;;
      *) die "unknown service '$s' (want kafka, redis, registry, python, tools, bench, flink, kstreams or kafka-secure)" ;;
    esac
    write_env
  done
  registry_wait
  write_env
  log "env file: $ENV_FILE"
}

cmd_stop() {
  local s list
  list=$(services "$@")
  # The opt-in secured broker stops with everything when it was started.
  if (($# == 0)) && [[ -d "$STATE/kafka-secure" ]]; then list="$list kafka-secure"; fi
  for s in $list; do
    case $s in
      kafka) stop_kafka ;; redis) stop_redis ;; registry) stop_registry ;;
      kafka-secure) stop_kafka_secure ;;
      python | tools | bench | flink | kstreams) ;; # caches: remove .local/venv (.local/flink, .local/kstreams) to rebuild them
      *) die "unknown service '$s' (want kafka, redis, registry, python, tools, bench, flink, kstreams or kafka-secure)" ;;
    esac
  done
  write_env
  if [[ "${KEEP:-0}" != 1 ]]; then rmdir "$STATE" 2>/dev/null || true; fi
}

cmd_status() {
  local rc=0 pid
  pid=$(read_pid "$STATE/kafka/kafka.pid")
  if alive "$pid" kafka.Kafka; then echo "kafka:    running pid $pid $(grep -h '^BRIDGE_TEST_KAFKA_SEEDS' "$STATE/kafka/env" 2>/dev/null)"; else echo "kafka:    stopped"; rc=3; fi
  pid=$(read_pid "$STATE/redis/redis.pid")
  if alive "$pid" redis-server; then echo "redis:    running pid $pid $(grep -h '^BRIDGE_TEST_REDIS_ADDR' "$STATE/redis/env" 2>/dev/null)"; else echo "redis:    stopped"; rc=3; fi
  pid=$(read_pid "$STATE/registry/registry.pid")
  if registry_alive; then echo "registry: running pid $pid $(grep -h '^BRIDGE_TEST_REGISTRY_URL' "$STATE/registry/env" 2>/dev/null)"; else echo "registry: stopped"; rc=3; fi
  if [[ -x "$VENV/bin/python" ]]; then echo "python:   $VENV/bin/python"; else echo "python:   no venv"; rc=3; fi
  if [[ -d "$STATE/kafka-secure" ]]; then # opt-in: reported only once started
    pid=$(read_pid "$STATE/kafka-secure/kafka.pid")
    if alive "$pid" "$STATE/kafka-secure/server.properties"; then echo "kafka-secure: running pid $pid $(grep -h '^BRIDGE_TEST_KAFKA_SECURE_SASL_SEEDS' "$STATE/kafka-secure/env" 2>/dev/null)"; else echo "kafka-secure: stopped"; fi
  fi
  return $rc
}

main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    restart) cmd_stop "$@"; cmd_start "$@" ;;
    status) cmd_status ;;
    env) cat "$ENV_FILE" ;;
    *) echo "usage: $0 start|stop|restart [kafka|redis|registry|python|tools|flink|kstreams|kafka-secure ...] | status | env" >&2; exit 2 ;;
  esac
}

main "$@"
