#!/usr/bin/env bash
# scripts/services.sh — make sure PostgreSQL and RabbitMQ are installed,
# running and reachable the way platformd's tests and demo expect, and that
# the console's browser tests have their browser:
#
#   PostgreSQL  127.0.0.1:5432, user postgres, no password (trust)
#   RabbitMQ    127.0.0.1:5672, guest/guest
#   Chromium    Debian's chromium package (headless, for test/console)
#   promtool    Debian's prometheus package (deploy/prometheus rule tests)
#   systemd-analyze  Debian's systemd package (deploy/systemd unit check;
#                    installing it does not make systemd PID 1)
#   ca-certificates, tzdata  copied into the container image (make image)
#   PHP         Debian's php-cli (php -S serves examples/billing-php, whose
#               test runs the PHP handler for real)
#
# Works on a fresh Debian 12 (installs missing packages with apt-get) and on
# machines where systemd is not PID 1. Idempotent: a second run changes
# nothing and prints "already ..." lines. Needs root (or sudo) only when
# something has to be installed, started or reconfigured.
#
# Environment:
#   SERVICES_TIMEOUT   seconds to wait for each service to answer (default 120)
#   PG_MIN_CONNECTIONS minimum max_connections for PostgreSQL (default 200)
#   PG_CLUSTER, PG_PORT Debian cluster name and port (default main, 5432; only
#                      for testing this script against a scratch cluster)
#   SERVICES_NO_BROWSER set to 1 to skip installing chromium
#   SERVICES_NO_DEPLOY_TOOLS set to 1 to skip installing promtool and
#                      systemd-analyze (make test then skips their checks)
#   SERVICES_NO_PHP    set to 1 to skip installing php-cli
set -euo pipefail

TIMEOUT="${SERVICES_TIMEOUT:-120}"
PG_MIN_CONNECTIONS="${PG_MIN_CONNECTIONS:-200}"
PG_HOST=127.0.0.1
PG_CLUSTER="${PG_CLUSTER:-main}"
PG_PORT="${PG_PORT:-5432}"
AMQP_HOST=127.0.0.1
AMQP_PORT=5672

# Debian keeps the service binaries in sbin, which non-root PATHs lack.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

say() { printf '%s\n' "$*"; }
die() {
	printf 'services.sh: error: %s\n' "$*" >&2
	exit 1
}

# as_root runs a command as root: directly when we are root, else with sudo.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo -n "$@"
	else
		die "need root to run: $*"
	fi
}

# as_postgres runs a command as the postgres OS user (peer auth on the socket).
as_postgres() {
	if [ "$(id -un)" = postgres ]; then
		(cd / && "$@")
	elif [ "$(id -u)" -eq 0 ]; then
		(cd / && runuser -u postgres -- "$@")
	else
		(cd / && sudo -n -u postgres "$@")
	fi
}

APT_UPDATED=0
apt_install() {
	if [ "$APT_UPDATED" -eq 0 ]; then
		say "apt: updating package lists"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >/dev/null
		APT_UPDATED=1
	fi
	say "apt: installing $*"
	# Keep the packages' maintainer scripts from starting the services
	# (invoke-rc.d honours policy-rc.d): this script starts them itself, the
	# way that works without systemd, and a failed start in a postinst would
	# leave the package half-configured.
	local policy=/usr/sbin/policy-rc.d own_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
		as_root chmod 755 "$policy"
		own_policy=1
	fi
	local rc=0
	# APT_NO_RECOMMENDS=1 (set by a caller for one call) installs only
	# what the package depends on.
	local extra=()
	if [ "${APT_NO_RECOMMENDS:-}" = 1 ]; then
		extra=(--no-install-recommends)
	fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${extra[@]}" \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"$@" </dev/null >/dev/null || rc=$?
	if [ "$own_policy" -eq 1 ]; then
		as_root rm -f "$policy"
	fi
	[ "$rc" -eq 0 ] || die "apt-get install $* failed (exit $rc)"
}

# ---------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------

pg_binaries_present() {
	command -v pg_ctlcluster >/dev/null 2>&1 &&
		command -v pg_isready >/dev/null 2>&1 &&
		command -v psql >/dev/null 2>&1 &&
		compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

# pg_version prints the newest version that has a cluster config in
# /etc/postgresql, else the newest installed server.
pg_version() {
	local v
	v="$(find /etc/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort -V | tail -n1)"
	if [ -z "$v" ]; then
		v="$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort -V | tail -n1)"
	fi
	[ -n "$v" ] || die "postgresql: no installed server version found"
	printf '%s\n' "$v"
}

# pg_tcp_ok: can we log in over TCP as postgres with no password?
pg_tcp_ok() {
	PGCONNECT_TIMEOUT=5 PGPASSWORD='' psql -X -w -q -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres \
		-tAc 'select 1' </dev/null >/dev/null 2>&1
}

# pg_sql runs one statement as superuser: over TCP when that works, else over
# the local socket as the postgres OS user.
pg_sql() {
	if pg_tcp_ok; then
		PGCONNECT_TIMEOUT=5 psql -X -w -q -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres \
			-v ON_ERROR_STOP=1 -tAc "$1" </dev/null
	else
		as_postgres psql -X -w -q -p "$PG_PORT" -d postgres -v ON_ERROR_STOP=1 -tAc "$1" </dev/null
	fi
}

pg_wait() {
	local deadline=$((SECONDS + TIMEOUT))
	until pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t 2 || pg_isready -q -p "$PG_PORT" -t 2; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			die "postgresql: not ready after ${TIMEOUT}s (see /var/log/postgresql/postgresql-${PG_VER}-${PG_CLUSTER}.log)"
		fi
		sleep 1
	done
}

ensure_postgres() {
	if ! pg_binaries_present; then
		apt_install postgresql
		pg_binaries_present || die "postgresql: installed but pg_ctlcluster/psql/postgres still missing"
		say "postgresql: installed"
	fi

	PG_VER="$(pg_version)"
	local confdir="/etc/postgresql/$PG_VER/$PG_CLUSTER"

	if ! [ -f "$confdir/postgresql.conf" ]; then
		as_root pg_createcluster --port "$PG_PORT" "$PG_VER" "$PG_CLUSTER" >/dev/null
		say "postgresql: created cluster $PG_VER/$PG_CLUSTER"
	fi

	if as_root pg_ctlcluster "$PG_VER" "$PG_CLUSTER" status >/dev/null 2>&1; then
		say "postgresql: already running"
	else
		as_root pg_ctlcluster --skip-systemctl-redirect "$PG_VER" "$PG_CLUSTER" start
		say "postgresql: started"
	fi
	pg_wait

	local reload=0 restart=0

	# Password-less TCP login for user postgres from loopback.
	if ! pg_tcp_ok; then
		local hba
		hba="$(pg_sql 'show hba_file')"
		[ -n "$hba" ] || hba="$confdir/pg_hba.conf"
		local want=() line
		for line in 'host all all 127.0.0.1/32 trust' 'host all all ::1/128 trust'; do
			# shellcheck disable=SC2086 # split on purpose: compare word by word
			if ! awk -v want="$(printf '%s ' $line)" '
				{ s = ""; for (i = 1; i <= NF; i++) s = s $i " " }
				s == want { found = 1 }
				END { exit !found }' "$hba"; then
				want+=("$line")
			fi
		done
		if [ "${#want[@]}" -gt 0 ]; then
			local tmp
			tmp="$(mktemp)"
			{
				echo '# added by platformd scripts/services.sh: password-less loopback access for tests'
				printf '%s\n' "${want[@]}"
				as_root cat "$hba"
			} >"$tmp"
			as_root cp "$tmp" "$hba"
			rm -f "$tmp"
			say "postgresql: added loopback trust lines to $hba"
			reload=1
		fi

		local listen
		listen="$(pg_sql 'show listen_addresses')"
		case ",${listen// /}," in
		*,localhost,* | *,127.0.0.1,* | *,\*,*) ;;
		*)
			local newlisten="localhost"
			[ -z "${listen// /}" ] || newlisten="$listen,localhost"
			pg_sql "alter system set listen_addresses = '$newlisten'" >/dev/null
			say "postgresql: set listen_addresses = '$newlisten'"
			restart=1
			;;
		esac
	fi

	# Tests open many pools.
	local maxconn
	maxconn="$(pg_sql 'show max_connections')"
	if [ "$maxconn" -lt "$PG_MIN_CONNECTIONS" ]; then
		pg_sql "alter system set max_connections = $PG_MIN_CONNECTIONS" >/dev/null
		say "postgresql: raised max_connections $maxconn -> $PG_MIN_CONNECTIONS"
		restart=1
	fi

	if [ "$restart" -eq 1 ]; then
		as_root pg_ctlcluster --skip-systemctl-redirect "$PG_VER" "$PG_CLUSTER" restart
		say "postgresql: restarted"
		pg_wait
	elif [ "$reload" -eq 1 ]; then
		as_root pg_ctlcluster --skip-systemctl-redirect "$PG_VER" "$PG_CLUSTER" reload
		say "postgresql: reloaded"
	fi

	local deadline=$((SECONDS + TIMEOUT))
	until pg_tcp_ok; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			die "postgresql: cannot log in as postgres at $PG_HOST:$PG_PORT without a password after ${TIMEOUT}s"
		fi
		sleep 1
	done
	say "postgresql: ready at $PG_HOST:$PG_PORT (user postgres)"
}

# ---------------------------------------------------------------------------
# RabbitMQ
# ---------------------------------------------------------------------------

rmqctl() {
	# rabbitmqctl boots an Erlang VM; bound every call so a wedged node cannot
	# hang CI.
	as_root timeout 60 rabbitmqctl "$@" </dev/null
}

amqp_port_open() {
	timeout 2 bash -c "exec 3<>/dev/tcp/$AMQP_HOST/$AMQP_PORT" 2>/dev/null
}

ensure_rabbitmq() {
	if ! { command -v rabbitmq-server && command -v rabbitmqctl; } >/dev/null 2>&1; then
		apt_install rabbitmq-server
		command -v rabbitmq-server >/dev/null 2>&1 || die "rabbitmq: installed but rabbitmq-server still missing"
		say "rabbitmq: installed"
		# The default node name is rabbit@<short hostname>; a node whose host
		# name does not resolve (common in containers) never boots. Pin it to
		# localhost in that case, on a fresh install only.
		local envconf=/etc/rabbitmq/rabbitmq-env.conf
		if ! getent hosts "$(hostname -s)" >/dev/null 2>&1 &&
			! grep -qs '^NODENAME=' "$envconf"; then
			echo 'NODENAME=rabbit@localhost' | as_root tee -a "$envconf" >/dev/null
			say "rabbitmq: host name does not resolve, set NODENAME=rabbit@localhost"
		fi
	fi

	if rmqctl -q status >/dev/null 2>&1; then
		say "rabbitmq: already running"
	else
		# -detached forks the node and returns at once.
		as_root rabbitmq-server -detached </dev/null >/dev/null
		say "rabbitmq: started"
	fi

	# await_startup fails at once until the node has registered with epmd, so
	# retry it until the deadline.
	local deadline=$((SECONDS + TIMEOUT))
	until rmqctl -q await_startup --timeout 50 >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			die "rabbitmq: node did not finish booting within ${TIMEOUT}s (see /var/log/rabbitmq/)"
		fi
		sleep 2
	done

	until amqp_port_open; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			die "rabbitmq: nothing listens on $AMQP_HOST:$AMQP_PORT after ${TIMEOUT}s"
		fi
		sleep 1
	done

	# guest/guest may log in from loopback by default (loopback_users); only
	# repair the account when it is missing or has another password.
	if ! rmqctl -q authenticate_user guest guest >/dev/null 2>&1; then
		if rmqctl -q list_users 2>/dev/null | awk '{print $1}' | grep -qx guest; then
			rmqctl -q change_password guest guest >/dev/null
		else
			rmqctl -q add_user guest guest >/dev/null
			rmqctl -q set_user_tags guest administrator >/dev/null
		fi
		say "rabbitmq: reset user guest/guest"
	fi
	if ! rmqctl -q list_user_permissions guest 2>/dev/null | awk '{print $1}' | grep -qx /; then
		rmqctl -q set_permissions -p / guest '.*' '.*' '.*' >/dev/null
		say "rabbitmq: granted guest full permissions on vhost /"
	fi
	say "rabbitmq: ready at $AMQP_HOST:$AMQP_PORT (guest/guest)"
}

# ---------------------------------------------------------------------------
# Chromium (the console's browser tests drive it headless with chromedp)
# ---------------------------------------------------------------------------

ensure_chromium() {
	if [ "${SERVICES_NO_BROWSER:-}" = 1 ]; then
		say "chromium: skipped (SERVICES_NO_BROWSER=1)"
		return
	fi
	if command -v chromium >/dev/null 2>&1; then
		say "chromium: already installed"
		return
	fi
	# fonts-dejavu-core: pages need a font to render text in screenshots.
	apt_install chromium fonts-dejavu-core
	command -v chromium >/dev/null 2>&1 || die "chromium: installed but the chromium command is still missing"
	say "chromium: installed ($(chromium --version 2>/dev/null || echo 'version unknown'))"
}

# ---------------------------------------------------------------------------
# Deploy checks' tools: promtool (alert rule tests), systemd-analyze (unit)
# ---------------------------------------------------------------------------

ensure_deploy_tools() {
	if [ "${SERVICES_NO_DEPLOY_TOOLS:-}" = 1 ]; then
		say "deploy tools: skipped (SERVICES_NO_DEPLOY_TOOLS=1)"
		return
	fi
	if command -v promtool >/dev/null 2>&1; then
		say "promtool: already installed"
	else
		# Debian ships promtool only inside the prometheus package. Without
		# recommends (no node exporter), and with the server's unit disabled
		# again: this machine wants the tool, not a Prometheus server at boot.
		APT_NO_RECOMMENDS=1 apt_install prometheus
		# --root=/ works whether or not systemd runs (it edits the links).
		if command -v systemctl >/dev/null 2>&1; then
			as_root systemctl --root=/ disable prometheus.service >/dev/null 2>&1 || true
		fi
		command -v promtool >/dev/null 2>&1 || die "promtool: installed but the promtool command is still missing"
		say "promtool: installed ($(promtool --version 2>&1 | head -n1))"
	fi
	if command -v systemd-analyze >/dev/null 2>&1; then
		say "systemd-analyze: already installed"
	else
		APT_NO_RECOMMENDS=1 apt_install systemd
		command -v systemd-analyze >/dev/null 2>&1 || die "systemd-analyze: installed but the command is still missing"
		say "systemd-analyze: installed"
	fi
}

# The container image copies the build machine's CA bundle and tzdata
# (deploy/image); minimal Debian images may lack either.
ensure_image_inputs() {
	if [ -s /etc/ssl/certs/ca-certificates.crt ] && [ -e /usr/share/zoneinfo/UTC ]; then
		say "ca-certificates, tzdata: already installed"
		return
	fi
	APT_NO_RECOMMENDS=1 apt_install ca-certificates tzdata
	[ -s /etc/ssl/certs/ca-certificates.crt ] || die "ca-certificates: installed but /etc/ssl/certs/ca-certificates.crt is missing"
	say "ca-certificates, tzdata: installed"
}

# ---------------------------------------------------------------------------
# PHP (examples/billing-php: a remote handler served by php -S)
# ---------------------------------------------------------------------------

ensure_php() {
	if [ "${SERVICES_NO_PHP:-}" = 1 ]; then
		say "php: skipped (SERVICES_NO_PHP=1)"
		return
	fi
	if command -v php >/dev/null 2>&1; then
		say "php: already installed"
		return
	fi
	apt_install php-cli
	command -v php >/dev/null 2>&1 || die "php: installed but the php command is still missing"
	say "php: installed ($(php -r 'echo PHP_VERSION;' 2>/dev/null || echo 'version unknown'))"
}

ensure_postgres
ensure_rabbitmq
ensure_chromium
ensure_deploy_tools
ensure_image_inputs
ensure_php
