#!/usr/bin/env bash
# Local test stack without Docker: a real Apache Kafka broker (KRaft, jars from
# Maven Central), a real redis-server (Debian package, AOF fsync always), a
# Confluent-compatible schema registry (franz-go srfake served by cmd/devstack)
# and a Python venv with independent readers (pyarrow, fastavro, confluent-kafka).
#
#   deploy/local/stack.sh start  [kafka|redis|registry|python|tools|flink|kstreams ...]   (default: all)
#   deploy/local/stack.sh start  bench    what `make bench` needs, nothing started (not in the default list)
#   deploy/local/stack.sh stop   [kafka|redis|registry ...]          (KEEP=1 keeps data)
#   deploy/local/stack.sh status
#   deploy/local/stack.sh env          print the env file
#
# Every service listens on a free port of 127.0.0.1. State lives in .local/ at the
# repository root (override with BRIDGE_LOCAL_DIR): stack/<service>/ holds pid,
# config, log and data; stack.env holds the addresses for the tests. Caches that
# survive stop: kafka-libs/ (broker jars), venv/ (Python), bin/devstack,
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
    for f in "$STATE"/kafka/env "$STATE"/redis/env "$STATE"/registry/env "$LOCAL"/venv.env "$LOCAL"/tools.env; do
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

start_registry() {
  local d="$STATE/registry" pid
  pid=$(read_pid "$d/registry.pid")
  if alive "$pid" "devstack registry"; then
    log "registry: already running (pid $pid) at $(sed -n 's/^BRIDGE_TEST_REGISTRY_URL=//p' "$d/env")"
    return 0
  fi
  mkdir -p "$d"
  rm -f "$d/addr"
  local t0; t0=$(now_ms)
  setsid "$DEVSTACK" registry -addr 127.0.0.1:0 -addr-file "$d/addr" </dev/null >>"$d/registry.log" 2>&1 &
  pid=$!
  echo "$pid" >"$d/registry.pid"
  local deadline=$(( $(date +%s) + 20 ))
  until [[ -s "$d/addr" ]] && "$DEVSTACK" registry-ready -url "http://$(cat "$d/addr")" 2>/dev/null; do
    # kill -0, not alive(): until the forked shell has exec'd setsid and then
    # devstack, /proc/$pid/cmdline is still this script's, and the pattern
    # would report a starting registry as exited.
    kill -0 "$pid" 2>/dev/null || die "registry exited: $(tail -5 "$d/registry.log")"
    (( $(date +%s) < deadline )) || die "registry did not answer in 20s"
    sleep 0.05
  done
  local url
  url="http://$(tr -d '\n' <"$d/addr")"
  cat >"$d/env" <<EOF
BRIDGE_TEST_REGISTRY_URL=$url
BRIDGE_TEST_REGISTRY_KIND=srfake
EOF
  log "registry: franz-go srfake (Confluent-compatible, in-memory) pid $pid at $url, ready in $(since "$t0")"
}

stop_registry() {
  stop_pid registry "$STATE/registry/registry.pid" "devstack registry" 10
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
  local v
  v=$(promtool --version 2>&1 | head -1)
  echo "BRIDGE_TEST_PROMTOOL=$(command -v promtool)" >"$LOCAL/tools.env"
  log "tools: $(command -v promtool) ($v)"
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
  for s in $(services "$@"); do
    case $s in
      kafka) start_kafka ;; redis) start_redis ;; registry) start_registry ;; python) start_python ;; tools) start_tools ;;
      bench) start_bench ;;
      flink) start_flink ;;
      kstreams) start_kstreams ;;
      *) die "unknown service '$s' (want kafka, redis, registry, python, tools, bench, flink or kstreams)" ;;
    esac
    write_env
  done
  log "env file: $ENV_FILE"
}

cmd_stop() {
  local s
  for s in $(services "$@"); do
    case $s in
      kafka) stop_kafka ;; redis) stop_redis ;; registry) stop_registry ;;
      python | tools | bench | flink | kstreams) ;; # caches: remove .local/venv (.local/flink, .local/kstreams) to rebuild them
      *) die "unknown service '$s' (want kafka, redis, registry, python, tools, bench, flink or kstreams)" ;;
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
  if alive "$pid" "devstack registry"; then echo "registry: running pid $pid $(grep -h '^BRIDGE_TEST_REGISTRY_URL' "$STATE/registry/env" 2>/dev/null)"; else echo "registry: stopped"; rc=3; fi
  if [[ -x "$VENV/bin/python" ]]; then echo "python:   $VENV/bin/python"; else echo "python:   no venv"; rc=3; fi
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
    *) echo "usage: $0 start|stop|restart [kafka|redis|registry|python|tools|flink|kstreams ...] | status | env" >&2; exit 2 ;;
  esac
}

main "$@"
