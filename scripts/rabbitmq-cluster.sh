#!/usr/bin/env bash
# scripts/rabbitmq-cluster.sh — a throwaway three-node RabbitMQ cluster on
# this machine, for the chaos suite's cluster phase (`make chaos-cluster`),
# beside (never instead of) the main broker on 5672 that every other test
# uses:
#
#   rabbit-c1@localhost  amqp://guest:guest@127.0.0.1:5701/  dist port 25701
#   rabbit-c2@localhost  amqp://guest:guest@127.0.0.1:5702/  dist port 25702
#   rabbit-c3@localhost  amqp://guest:guest@127.0.0.1:5703/  dist port 25703
#
# Each node has its own node name, AMQP and distribution ports, data and log
# directories under $RABBITMQ_CLUSTER_DIR, and no plugins; the three share an
# Erlang cookie of their own (not the main broker's, so that nothing here can
# reach or join the main node). Memory is bounded for a 2-core machine: one
# Erlang scheduler per node (+S 1:1), a 512 MiB high watermark.
#
# Usage:
#   rabbitmq-cluster.sh start           start the nodes that are down, cluster them (idempotent)
#   rabbitmq-cluster.sh stop            stop every node, heal, remove the data (idempotent)
#   rabbitmq-cluster.sh status          each node's state and the cluster's running members
#   rabbitmq-cluster.sh urls            the AMQP URLs, comma-separated
#   rabbitmq-cluster.sh node-stop N     stop node N gracefully (its data stays)
#   rabbitmq-cluster.sh node-kill N     SIGKILL node N's VM, a crash (its data stays)
#   rabbitmq-cluster.sh node-start N    start node N again; it rejoins the cluster
#   rabbitmq-cluster.sh partition N     cut node N from the other two (see below)
#   rabbitmq-cluster.sh heal            end every partition
#   rabbitmq-cluster.sh partition-method   print iptables or cookie
#   rabbitmq-cluster.sh logs            the last lines of each node's log
#   rabbitmq-cluster.sh ctl N ARGS...   rabbitmqctl ARGS against node N
#   rabbitmq-cluster.sh queues N ARGS...   rabbitmq-queues ARGS against node N
#
# A partition is real when iptables works: packets between node N and the
# other nodes' distribution ports are dropped on the loopback interface
# (node N's outgoing distribution connections leave from its own address,
# 127.0.0.1N, so that they can be told apart). Without iptables it falls back
# to changing node N's Erlang cookie and disconnecting it: the nodes can no
# longer reach each other, though the sockets are closed rather than
# black-holed. The nodes run with cluster_partition_handling = pause_minority
# and net_ticktime = 15 s (RabbitMQ's default is 60 s; much lower gives false
# partitions on a loaded 2-core machine), so a cut node pauses and closes its
# client connections within about 15 s.
#
# Environment:
#   RABBITMQ_CLUSTER_DIR        data, logs and cookie (default /tmp/platformd-rabbitmq-cluster)
#   RABBITMQ_CLUSTER_PORT_BASE  AMQP ports are base+1..3, distribution ports base+20001..3 (default 5700)
#   RABBITMQ_CLUSTER_NODE_PREFIX  node names are PREFIX1..3@localhost (default rabbit-c)
#   RABBITMQ_CLUSTER_IP_PREFIX  node N's distribution connections leave from PREFIX N (default 127.0.0.1: 127.0.0.11..13)
#   RABBITMQ_CLUSTER_CHAIN      the iptables chain of the partitions (default PLATFORMD-RMQ-CLUSTER)
#   RABBITMQ_CLUSTER_EXTRA_CONF lines added to every node's rabbitmq.conf (default none)
#   RABBITMQ_CLUSTER_TIMEOUT    seconds to wait for a node to boot (default 120)
#   RABBITMQ_CLUSTER_PARTITION  iptables or cookie: the partition method (default iptables when it works)
#   RABBITMQ_CLUSTER_REJOIN     seconds a node has to run again after a heal before its VM is restarted (default 60)
#
# A second cluster beside the first (the soak's, scripts/soak.sh) sets all of
# DIR, PORT_BASE, NODE_PREFIX, IP_PREFIX and CHAIN to values of its own: it
# then shares nothing with the first but epmd, where its nodes' names differ.
#
# A node that boots hung: RabbitMQ 3.10.8 (Debian 12's) on Erlang 25.1 or
# later can hang in its boot when it rejoins after a partition, for good:
# its "global hang workaround" sends messages that Erlang's global no longer
# handles (rabbitmq-server#6034, fixed by #6046 in later 3.10 releases), and
# it logs that workaround and goes no further. Seen once in CI in the chaos
# cluster phase. heal and node-start restart such a node in a new VM, which
# boots and rejoins; they say so, with the reason.
set -euo pipefail

export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

BASE="${RABBITMQ_CLUSTER_DIR:-/tmp/platformd-rabbitmq-cluster}"
PORT_BASE="${RABBITMQ_CLUSTER_PORT_BASE:-5700}"
TIMEOUT="${RABBITMQ_CLUSTER_TIMEOUT:-120}"
REJOIN="${RABBITMQ_CLUSTER_REJOIN:-60}"
HANG_SIGN='Global hang workaround'
NODES=(1 2 3)
NODE_PREFIX="${RABBITMQ_CLUSTER_NODE_PREFIX:-rabbit-c}"
IP_PREFIX="${RABBITMQ_CLUSTER_IP_PREFIX:-127.0.0.1}"
CHAIN="${RABBITMQ_CLUSTER_CHAIN:-PLATFORMD-RMQ-CLUSTER}"

say() { printf 'rabbitmq-cluster: %s\n' "$*"; }
die() {
	printf 'rabbitmq-cluster: error: %s\n' "$*" >&2
	exit 1
}

# The Debian wrappers in /usr/sbin switch to the rabbitmq user and its
# cookie; the scripts behind them take the environment as given.
RMQ_BIN=/usr/lib/rabbitmq/bin
[ -x "$RMQ_BIN/rabbitmq-server" ] || RMQ_BIN="$(dirname "$(command -v rabbitmq-server || echo /nonexistent/x)")"
[ -x "$RMQ_BIN/rabbitmq-server" ] || die "rabbitmq-server not found (run scripts/services.sh first)"

node_name() { printf '%s%s@localhost' "$NODE_PREFIX" "$1"; }
amqp_port() { printf '%s' $((PORT_BASE + $1)); }
dist_port() { printf '%s' $((PORT_BASE + 20000 + $1)); }
node_ip() { printf '%s%s' "$IP_PREFIX" "$1"; }
node_dir() { printf '%s/c%s' "$BASE" "$1"; }

check_node() {
	case "${1:-}" in
	1 | 2 | 3) ;;
	*) die "node must be 1, 2 or 3, not '${1:-}'" ;;
	esac
}

# node_env N prints the environment of node N (for env -i style use), one
# VAR=value a line.
node_env() {
	local n=$1 dir
	dir="$(node_dir "$n")"
	printf '%s\n' \
		"HOME=$BASE" \
		"PATH=$PATH" \
		"LANG=C.UTF-8" \
		"LC_ALL=C.UTF-8" \
		"ERL_EPMD_ADDRESS=127.0.0.1" \
		"RABBITMQ_NODENAME=$(node_name "$n")" \
		"RABBITMQ_CONF_ENV_FILE=$BASE/rabbitmq-env.conf" \
		"RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf" \
		"RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config" \
		"RABBITMQ_ENABLED_PLUGINS_FILE=$BASE/enabled_plugins" \
		"RABBITMQ_MNESIA_BASE=$dir/mnesia" \
		"RABBITMQ_LOG_BASE=$dir/log" \
		"RABBITMQ_PID_FILE=$dir/rabbit.pid" \
		"RABBITMQ_DIST_PORT=$(dist_port "$n")" \
		"RABBITMQ_NODE_PORT=$(amqp_port "$n")" \
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1" \
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+S 1:1 +A 4 -kernel inet_dist_use_interface {127,0,0,1} -kernel inet_dist_connect_options [{ip,{$(node_ip "$n" | tr . ,)}}] -kernel net_ticktime 15"
}

# in_node_env N CMD... runs CMD with node N's environment only. Without
# $BASE (never started, or stopped) there is no node to ask: the CLI's
# Erlang VM would fail to write its cookie there and leave an
# erl_crash.dump in the caller's working directory.
in_node_env() {
	local n=$1
	shift
	[ -d "$BASE" ] || return 1
	local envs=(ERL_CRASH_DUMP="$BASE/erl_crash.dump")
	mapfile -t -O 1 envs < <(node_env "$n")
	env -i "${envs[@]}" "$@"
}

# ctl N ARGS... runs rabbitmqctl against node N, bounded in time.
ctl() {
	local n=$1
	shift
	in_node_env "$n" timeout 60 "$RMQ_BIN/rabbitmqctl" -n "$(node_name "$n")" "$@" </dev/null
}

queues_cli() {
	local n=$1
	shift
	in_node_env "$n" timeout 60 "$RMQ_BIN/rabbitmq-queues" -n "$(node_name "$n")" "$@" </dev/null
}

prepare() {
	mkdir -p "$BASE"
	chmod 700 "$BASE"
	if [ ! -s "$BASE/.erlang.cookie" ]; then
		# One cookie for the three nodes (and the CLI calls below).
		(umask 077 && head -c 30 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr 'a-f' 'A-F' >"$BASE/.erlang.cookie")
		chmod 400 "$BASE/.erlang.cookie"
	fi
	: >"$BASE/rabbitmq-env.conf"
	echo '[].' >"$BASE/enabled_plugins"
	local n dir
	for n in "${NODES[@]}"; do
		dir="$(node_dir "$n")"
		mkdir -p "$dir/mnesia" "$dir/log"
		cat >"$dir/rabbitmq.conf" <<EOF
# Written by scripts/rabbitmq-cluster.sh for node $(node_name "$n").
listeners.tcp.1 = 127.0.0.1:$(amqp_port "$n")
loopback_users = none
vm_memory_high_watermark.absolute = 512MiB
disk_free_limit.absolute = 64MiB
cluster_partition_handling = pause_minority
log.file.level = info
log.console = false
${RABBITMQ_CLUSTER_EXTRA_CONF:-}
EOF
		echo '[].' >"$dir/advanced.config"
	done
}

node_pid() {
	local f
	f="$(node_dir "$1")/rabbit.pid"
	[ -s "$f" ] && cat "$f"
}

node_vm_alive() {
	local pid
	pid="$(node_pid "$1" 2>/dev/null)" || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# node_up N: the node answers and its rabbit application runs.
node_up() {
	ctl "$1" -q await_startup --timeout 5 >/dev/null 2>&1
}

start_node() {
	local n=$1
	if node_up "$n"; then
		say "$(node_name "$n"): already running"
		return 0
	fi
	if ! node_vm_alive "$n"; then
		in_node_env "$n" "$RMQ_BIN/rabbitmq-server" -detached >>"$(node_dir "$n")/log/startup.log" 2>&1 </dev/null
		say "$(node_name "$n"): starting (amqp port $(amqp_port "$n"), dist port $(dist_port "$n"))"
	fi
}

wait_node() {
	local n=$1 deadline=$((SECONDS + TIMEOUT))
	# await_startup fails at once until the node has registered with epmd.
	until ctl "$n" -q await_startup --timeout 30 >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 30 "$(node_dir "$n")"/log/*.log >&2 || true
			die "$(node_name "$n") did not boot within ${TIMEOUT}s (logs in $(node_dir "$n")/log)"
		fi
		sleep 1
	done
}

# log_size N prints the size of node N's log now (0 when there is none).
log_size() {
	local f
	f="$(node_dir "$1")/log/$(node_name "$1").log"
	if [ -f "$f" ]; then stat -c %s "$f"; else echo 0; fi
}

# await_rejoin N FROM waits for node N, whose VM lives, to run again (after a
# heal, or a node-start that found its VM alive). FROM is the size of its log
# before: a boot that logged HANG_SIGN since then and is still not done 10 s
# later, or that is not done within REJOIN seconds, hung (see the top), and
# the node is restarted in a new VM, once.
await_rejoin() {
	local n=$1 from=$2 deadline=$((SECONDS + REJOIN)) hung=0 f why
	f="$(node_dir "$n")/log/$(node_name "$n").log"
	until node_up "$n"; do
		if [ "$hung" -eq 0 ] && tail -c +"$((from + 1))" "$f" 2>/dev/null | grep -q "$HANG_SIGN"; then
			hung=$((SECONDS + 10))
		fi
		why=""
		if [ "$hung" -gt 0 ] && [ "$SECONDS" -ge "$hung" ]; then
			why="its boot hung after logging '$HANG_SIGN' (rabbitmq-server#6034)"
		elif [ "$SECONDS" -ge "$deadline" ]; then
			why="not running after ${REJOIN}s"
		fi
		if [ -n "$why" ]; then
			say "$(node_name "$n"): $why: restarting its VM"
			cmd_node_kill "$n" >/dev/null
			start_node "$n" >/dev/null
			wait_node "$n"
			return 0
		fi
		sleep 1
	done
}

# running_members N prints the running nodes of N's cluster, one a line.
running_members() {
	ctl "$1" -q eval 'io:format("~s~n", [string:join([atom_to_list(X) || X <- rabbit_nodes:all_running()], "\n")]).' 2>/dev/null |
		grep '@' || true
}

# ensure_iptables installs iptables when it is missing and this runs as
# root on Debian, for real partitions; without it partitions fall back to
# the cookie method.
ensure_iptables() {
	[ "${RABBITMQ_CLUSTER_PARTITION:-}" != cookie ] || return 0
	iptables_works && return 0
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		say "installing iptables (for real partitions)"
		{ DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables; } </dev/null >/dev/null 2>&1 || true
	fi
	have_iptables || say "iptables unavailable: partitions change the Erlang cookie instead"
}

cmd_start() {
	ensure_iptables
	prepare
	local n
	for n in "${NODES[@]}"; do start_node "$n"; done
	for n in "${NODES[@]}"; do wait_node "$n"; done
	local seed
	seed="$(node_name 1)"
	for n in 2 3; do
		if ctl "$n" -q cluster_status --formatter json 2>/dev/null | grep -q "\"$seed\""; then
			continue
		fi
		local log
		log="$(node_dir "$n")/log/join.log"
		{ ctl "$n" -q stop_app && ctl "$n" -q reset && ctl "$n" -q join_cluster "$seed" && ctl "$n" -q start_app; } >>"$log" 2>&1 ||
			die "$(node_name "$n"): join $seed failed: $(tail -n 5 "$log")"
		say "$(node_name "$n"): joined $seed"
	done
	local deadline=$((SECONDS + TIMEOUT))
	until [ "$(running_members 1 | wc -l)" -eq 3 ]; do
		[ "$SECONDS" -lt "$deadline" ] || die "cluster has not 3 running members after ${TIMEOUT}s: $(running_members 1 | tr '\n' ' ')"
		sleep 1
	done
	say "ready: $(cmd_urls)"
}

cmd_stop() {
	cmd_heal nowait >/dev/null 2>&1 || true
	if iptables_works; then
		iptables -D OUTPUT -o lo -j "$CHAIN" 2>/dev/null || true
		iptables -X "$CHAIN" 2>/dev/null || true
	fi
	local n pid
	for n in "${NODES[@]}"; do
		if node_vm_alive "$n"; then
			ctl "$n" -q stop >/dev/null 2>&1 || true
		fi
	done
	for n in "${NODES[@]}"; do
		pid="$(node_pid "$n" 2>/dev/null)" || continue
		local deadline=$((SECONDS + 30))
		while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	rm -rf "$BASE"
	say "stopped and removed"
}

cmd_status() {
	local n
	for n in "${NODES[@]}"; do
		if node_up "$n"; then
			say "$(node_name "$n"): running at amqp://127.0.0.1:$(amqp_port "$n")/"
		elif node_vm_alive "$n"; then
			say "$(node_name "$n"): VM up, rabbit not running (paused or booting)"
		else
			say "$(node_name "$n"): down"
		fi
	done
	for n in "${NODES[@]}"; do
		if node_up "$n"; then
			say "running members: $(running_members "$n" | tr '\n' ' ')"
			return 0
		fi
	done
	return 3
}

cmd_urls() {
	local n out=()
	for n in "${NODES[@]}"; do out+=("amqp://guest:guest@127.0.0.1:$(amqp_port "$n")/"); done
	(
		IFS=,
		echo "${out[*]}"
	)
}

cmd_node_stop() {
	check_node "$1"
	if node_vm_alive "$1"; then
		# With the pid file, stop returns once the VM has exited.
		ctl "$1" -q stop "$(node_dir "$1")/rabbit.pid" >/dev/null
	fi
	say "$(node_name "$1"): stopped"
}

cmd_node_kill() {
	check_node "$1"
	local pid
	if pid="$(node_pid "$1" 2>/dev/null)" && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid"
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	fi
	say "$(node_name "$1"): killed"
}

cmd_node_start() {
	check_node "$1"
	if ! node_up "$1" && node_vm_alive "$1"; then
		# A VM without its rabbit: paused, booting, or hung in its boot.
		await_rejoin "$1" 0
	else
		start_node "$1"
		wait_node "$1"
	fi
	say "$(node_name "$1"): running"
}

# iptables_works: iptables is installed and usable here.
iptables_works() {
	command -v iptables >/dev/null 2>&1 && iptables -w 5 -L OUTPUT -n >/dev/null 2>&1
}

# have_iptables: partitions use iptables (unless told to use the cookie).
have_iptables() {
	[ "${RABBITMQ_CLUSTER_PARTITION:-}" != cookie ] && iptables_works
}

cmd_partition_method() {
	if have_iptables; then echo iptables; else echo cookie; fi
}

cmd_partition() {
	check_node "$1"
	local n=$1
	if have_iptables; then
		iptables -w 5 -N "$CHAIN" 2>/dev/null || true
		iptables -w 5 -C OUTPUT -o lo -j "$CHAIN" 2>/dev/null || iptables -w 5 -I OUTPUT -o lo -j "$CHAIN"
		# Connections to node N's distribution listener, and those it opens
		# from its own address: node N and the others then see nothing of
		# each other (the CLI cannot reach node N either). AMQP and epmd
		# traffic pass.
		iptables -w 5 -A "$CHAIN" -p tcp --dport "$(dist_port "$n")" -j DROP
		iptables -w 5 -A "$CHAIN" -p tcp --sport "$(dist_port "$n")" -j DROP
		iptables -w 5 -A "$CHAIN" -p tcp -s "$(node_ip "$n")" -j DROP
		iptables -w 5 -A "$CHAIN" -p tcp -d "$(node_ip "$n")" -j DROP
		echo "$n" >>"$BASE/cut"
		say "$(node_name "$n"): partitioned (iptables DROP on lo)"
		return 0
	fi
	# Fallback: a cookie nobody else has, then drop every connection.
	ctl "$n" -q eval "erlang:set_cookie(node(), platformd_partitioned), [erlang:disconnect_node(X) || X <- nodes()], ok." >/dev/null
	echo "$n" >>"$BASE/partitioned"
	say "$(node_name "$n"): partitioned (Erlang cookie changed, nodes disconnected)"
}

# cmd_heal [nowait] ends every partition and, unless told not to wait,
# waits for each node that was cut off to run again (await_rejoin).
cmd_heal() {
	local cut=() sizes=() n i
	if [ -s "$BASE/cut" ] || [ -s "$BASE/partitioned" ]; then
		mapfile -t cut < <(cat "$BASE/cut" "$BASE/partitioned" 2>/dev/null | sort -u)
	fi
	for n in "${cut[@]}"; do sizes+=("$(log_size "$n")"); done
	if iptables_works && iptables -w 5 -L "$CHAIN" -n >/dev/null 2>&1; then
		iptables -w 5 -F "$CHAIN"
	fi
	rm -f "$BASE/cut"
	if [ -s "$BASE/partitioned" ]; then
		local n cookie
		cookie="$(cat "$BASE/.erlang.cookie")"
		while read -r n; do
			in_node_env "$n" timeout 60 "$RMQ_BIN/rabbitmqctl" --erlang-cookie platformd_partitioned -n "$(node_name "$n")" -q \
				eval "erlang:set_cookie(node(), '$cookie'), ok." >/dev/null </dev/null || true
		done <"$BASE/partitioned"
		rm -f "$BASE/partitioned"
	fi
	if [ "${1:-}" != nowait ]; then
		for i in "${!cut[@]}"; do
			node_vm_alive "${cut[$i]}" && await_rejoin "${cut[$i]}" "${sizes[$i]}"
		done
	fi
	say "healed"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
urls) cmd_urls ;;
node-stop) cmd_node_stop "${2:-}" ;;
node-start) cmd_node_start "${2:-}" ;;
node-kill) cmd_node_kill "${2:-}" ;;
partition) cmd_partition "${2:-}" ;;
heal) cmd_heal ;;
partition-method) cmd_partition_method ;;
logs)
	for n in "${NODES[@]}"; do
		f="$(node_dir "$n")/log/$(node_name "$n").log"
		# Without the clients' comings and goings.
		[ -f "$f" ] && { echo "==> $f"; grep -v 'AMQP connection\|client-provided name\|authenticated and granted' "$f" | tail -n 80; }
	done
	;;
ctl)
	check_node "${2:-}"
	n=$2
	shift 2
	ctl "$n" "$@"
	;;
queues)
	check_node "${2:-}"
	n=$2
	shift 2
	queues_cli "$n" "$@"
	;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
