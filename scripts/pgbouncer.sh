#!/usr/bin/env bash
# scripts/pgbouncer.sh — a PgBouncer of platformd's own, in transaction
# pooling mode, in front of the local PostgreSQL (127.0.0.1:5432, trust), for
# the tests of `database_mode: pooler` (docs/tenants.md).
#
#   scripts/pgbouncer.sh start     install Debian's pgbouncer when missing, start it
#   scripts/pgbouncer.sh stop      stop it (no error when it is not running)
#   scripts/pgbouncer.sh restart   stop, then start: a real restart, every
#                                  client and server connection dropped
#   scripts/pgbouncer.sh status    exit 0 when it answers
#
# Idempotent: start when running and stop when stopped change nothing. Its
# config, pid and log live in a directory of its own under /tmp; it runs as
# the postgres user (PgBouncer refuses root) and never touches the shared
# PostgreSQL's configuration.
#
# Environment:
#   PGBOUNCER_PORT             port to listen on (default 6432)
#   PGBOUNCER_POOL_SIZE        server connections per database and user (default 10)
#   PGBOUNCER_MAX_SERVER_CONNS server connections of the user across every
#                              database (max_user_connections; default 50):
#                              a hundred databases behind one PgBouncer then
#                              share 50 server connections, an idle one
#                              closed for a database that needs one
#   PGBOUNCER_SERVER_IDLE      seconds an unused server connection stays open
#                              (server_idle_timeout; default 30)
#   PGBOUNCER_MAX_CLIENTS      client connections (max_client_conn; default 4000)
# Every database of the server is served (a wildcard entry): a new service
# database needs no change here.
set -euo pipefail

PORT="${PGBOUNCER_PORT:-6432}"
POOL_SIZE="${PGBOUNCER_POOL_SIZE:-10}"
MAX_SERVER_CONNS="${PGBOUNCER_MAX_SERVER_CONNS:-50}"
SERVER_IDLE="${PGBOUNCER_SERVER_IDLE:-30}"
MAX_CLIENTS="${PGBOUNCER_MAX_CLIENTS:-4000}"
DIR="/tmp/platformd-pgbouncer-$PORT"
PG_HOST=127.0.0.1
PG_PORT=5432
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

say() { printf 'pgbouncer.sh: %s\n' "$*"; }
die() {
	printf 'pgbouncer.sh: error: %s\n' "$*" >&2
	exit 1
}
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
as_postgres() {
	if [ "$(id -un)" = postgres ]; then
		"$@"
	elif [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		sudo -u postgres "$@"
	fi
}

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

install() {
	if command -v pgbouncer >/dev/null 2>&1; then
		return
	fi
	say "installing Debian's pgbouncer"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null ||
		{ as_root apt-get update -q >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null; } ||
		die "cannot install pgbouncer"
	# The package's own instance (port 6432, session mode) is not ours.
	as_root systemctl disable --now pgbouncer >/dev/null 2>&1 || true
	as_root service pgbouncer stop >/dev/null 2>&1 || true
}

write_config() {
	as_root mkdir -p "$DIR"
	as_root chown postgres "$DIR"
	as_postgres tee "$DIR/userlist.txt" >/dev/null <<<'"postgres" ""'
	as_postgres tee "$DIR/pgbouncer.ini" >/dev/null <<INI
[databases]
* = host=$PG_HOST port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = trust
auth_file = $DIR/userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = $POOL_SIZE
max_user_connections = $MAX_SERVER_CONNS
max_client_conn = $MAX_CLIENTS
server_idle_timeout = $SERVER_IDLE
ignore_startup_parameters = extra_float_digits
pidfile = $DIR/pgbouncer.pid
logfile = $DIR/pgbouncer.log
INI
}

start() {
	install
	if answers; then
		say "already running on 127.0.0.1:$PORT"
		return
	fi
	write_config
	# A file per client and server connection: the default soft limit
	# (1024) refuses clients ("accept() failed: Too many open files") well
	# below max_client_conn; raise it as far as the hard limit allows.
	as_postgres bash -c 'ulimit -n "$(( $2 + 200 ))" 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec pgbouncer -d -q "$1"' _ "$DIR/pgbouncer.ini" "$MAX_CLIENTS" ||
		die "pgbouncer did not start (see $DIR/pgbouncer.log)"
	for _ in $(seq 1 100); do
		if answers; then
			say "running on 127.0.0.1:$PORT (transaction pooling, $POOL_SIZE server connections per database, $MAX_SERVER_CONNS in all)"
			return
		fi
		sleep 0.1
	done
	die "pgbouncer does not answer on 127.0.0.1:$PORT (see $DIR/pgbouncer.log)"
}

stop() {
	local pid
	if [ ! -f "$DIR/pgbouncer.pid" ]; then
		say "not running"
		return
	fi
	pid="$(cat "$DIR/pgbouncer.pid")"
	as_root kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do
		if ! kill -0 "$pid" 2>/dev/null; then
			as_root rm -f "$DIR/pgbouncer.pid"
			say "stopped"
			return
		fi
		sleep 0.1
	done
	as_root kill -9 "$pid" 2>/dev/null || true
	as_root rm -f "$DIR/pgbouncer.pid"
	say "killed"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
restart)
	stop
	start
	;;
status) answers ;;
*) die "usage: $0 start|stop|restart|status" ;;
esac
