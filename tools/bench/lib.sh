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
