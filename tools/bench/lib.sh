# shellcheck shell=sh
# tools/bench/lib.sh - shell helpers of the bench and fuzz drivers; sourced
# (. "$(dirname "$0")/lib.sh" from a driver beside it), POSIX sh.

# apt_install PROG PKG...: install Debian packages when we can (root with
# apt-get), saying so as PROG. 0 when installed, 1 when we could not.
apt_install() {
	prog=$1
	shift
	[ $# -gt 0 ] || return 0
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		return 1
	fi
	echo "$prog: installing $* with apt-get"
	DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 && return 0
	echo "$prog: apt-get install $* failed" >&2
	return 1
}

# port_listening PORT: a TCP socket listens on PORT (/proc/net/tcp*).
port_listening() {
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6
}

# port_used PORT: any TCP socket (listening, connected, closing) holds it as
# its local port, so a bind to it would fail.
port_used() {
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" '$2 ~ p"$" { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6
}

# port_bound_udp PORT: a UDP socket is bound to PORT (/proc/net/udp*).
port_bound_udp() {
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" '$2 ~ p"$" { f = 1 } END { exit !f }' /proc/net/udp /proc/net/udp6
}

# free_port: a TCP port below the kernel's ephemeral range (where the
# clients' own sockets live: a load generator opens thousands), unused in
# any state, for a server that cannot pick its own and print it.
free_port() {
	lo=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
	[ -n "$lo" ] && [ "$lo" -gt 12000 ] || lo=32768
	span=$((lo - 10000))
	p=$((10000 + ($$ * 7 + $(date +%N | sed 's/^0*//;s/^$/0/') / 1000) % span))
	while port_used $p; do p=$((10000 + (p - 10000 + 1) % span)); done
	echo $p
}

# cpu_ns PID...: on-CPU nanoseconds so far of every thread of the PIDs (the
# first field of /proc/PID/task/*/schedstat), summed.
cpu_ns() {
	for pid in "$@"; do cat /proc/"$pid"/task/*/schedstat 2>/dev/null; done |
		awk '{ s += $1 } END { printf "%.0f", s }'
}

# haproxy_cfg FILE PORT UPSTREAM_PORT: the HAProxy 2.6 configuration both
# proxy benchmarks use (bench-proxy.sh, bench-proxy-instr.sh): one thread,
# mode tcp, splicing both ways as tcp-proxy's corio_copy_bidi does.
haproxy_cfg() {
	cat >"$1" <<EOF
global
	nbthread 1
	maxconn 4000
defaults
	mode tcp
	option splice-request
	option splice-response
	timeout connect 5s
	timeout client 60s
	timeout server 60s
frontend f
	bind 127.0.0.1:$2
	default_backend b
backend b
	server s1 127.0.0.1:$3
EOF
}
