#!/usr/bin/env bash
# scripts/soak.sh — `make soak`: platformd under an hour of random faults
# (test/soak), on services of its own that it starts and removes:
#
#   - a private PostgreSQL (initdb into the run's directory with the
#     installed server binaries, trust auth, port SOAK_PG_PORT), which the
#     soak restarts and whose sessions it terminates;
#   - a private three-node RabbitMQ cluster (scripts/rabbitmq-cluster.sh
#     with its own directory, ports, node names, addresses and iptables
#     chain), whose nodes the soak stops, kills and cuts off.
#
# Neither touches the shared PostgreSQL (5432), RabbitMQ (5672) or the
# chaos suite's cluster (5701-5703), so the soak may run beside make test.
#
# Environment:
#   SOAK_DURATION   how long the faults and load last (default 60m)
#   SOAK_SEED       replay a run's random choices (its log says the seed)
#   SOAK_BREAK      nodedup: run a daemon built without the dedup insert
#                   (the checker must catch it, and the run fails)
#   SOAK_DIR        where runs are kept (default /tmp/platformd-soak); each
#                   run gets run-<UTC time>/ with soak.log, soak.svg,
#                   curves.csv, summary.txt and the daemons' logs
#   SOAK_PG_PORT    the private PostgreSQL's port (default 5811)
#   SOAK_RMQ_PORT_BASE  the private cluster's AMQP ports are base+1..3 (default 5820)
#
# The summary line is printed last:
#   soak: <duration>, faults: N (kinds: K), events: N, applied twice: 0, lost: 0, leaks: none
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION="${SOAK_DURATION:-60m}"
ROOT="${SOAK_DIR:-/tmp/platformd-soak}"
RUN="$ROOT/run-$(date -u +%Y%m%dT%H%M%SZ)${SOAK_BREAK:+-$SOAK_BREAK}"
PG_PORT="${SOAK_PG_PORT:-5811}"
GO="${GO:-go}"

say() { printf 'soak: %s\n' "$*"; }
mkdir -p "$RUN"
RUN="$(cd "$RUN" && pwd)"

# The private RabbitMQ cluster: every name and port its own.
export RABBITMQ_CLUSTER_DIR="$RUN/rabbitmq"
export RABBITMQ_CLUSTER_PORT_BASE="${SOAK_RMQ_PORT_BASE:-5820}"
export RABBITMQ_CLUSTER_NODE_PREFIX=rabbit-soak
export RABBITMQ_CLUSTER_IP_PREFIX=127.0.0.2
export RABBITMQ_CLUSTER_CHAIN=PLATFORMD-SOAK
# A quorum queue's entries stay in the node's memory (its quorum_ets) until
# the write-ahead log rolls over, at 512 MiB by default: in a 10-minute run
# that is a straight climb, which the leak verdict would rightly call
# growing (measured at the soak's load: quorum_ets 10 -> 27 MiB in 2
# minutes on a node). A 16 MiB log rolls over every two minutes or so, so
# the broker's curve shows its real trend (a sawtooth around a level, or a
# climb of its own).
export RABBITMQ_CLUSTER_EXTRA_CONF='raft.wal_max_size_bytes = 16777216'

# The private PostgreSQL: the newest installed server, run by the postgres
# user when this runs as root (initdb refuses root).
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
[ -x "$PG_BIN/initdb" ] || {
	echo "soak: no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (run scripts/services.sh)" >&2
	exit 1
}
PG_DATA="$RUN/pg"
PG_USER=""
as_pg() { "$@"; }
if [ "$(id -u)" -eq 0 ]; then
	PG_USER=postgres
	as_pg() { runuser -u postgres -- "$@"; }
fi

cleanup() {
	set +e
	bash scripts/rabbitmq-cluster.sh stop >/dev/null 2>&1
	as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1
	rm -rf "$PG_DATA"
}
trap cleanup EXIT

say "run directory $RUN"
mkdir -p "$PG_DATA"
[ -z "$PG_USER" ] || chown "$PG_USER" "$PG_DATA" "$RUN"
as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 >"$RUN/initdb.log" 2>&1
cat >>"$PG_DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_DATA'
max_connections = 300
shared_buffers = 64MB
fsync = on
CONF
as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$RUN/postgresql.log" -w start >/dev/null
say "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT"
bash scripts/rabbitmq-cluster.sh start

rc=0
SOAK=1 SOAK_DURATION="$DURATION" SOAK_RUN_DIR="$RUN" SOAK_PG_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres" \
	SOAK_PG_DATA="$PG_DATA" SOAK_PG_BIN="$PG_BIN" SOAK_PG_USER="$PG_USER" \
	"$GO" test -count=1 -v -run '^TestSoak$' -timeout 24h ./test/soak/ 2>&1 | tee "$RUN/soak.log" || rc=$?
cleanup
trap - EXIT
[ ! -f "$RUN/soak.svg" ] || say "picture: $RUN/soak.svg"
if [ -s "$RUN/summary.txt" ]; then
	cat "$RUN/summary.txt"
else
	echo "soak: no summary (the run failed before its checker; see $RUN/soak.log)"
	[ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
