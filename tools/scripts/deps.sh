#!/bin/sh
# Check for corio's build dependencies (Debian packages); install the missing
# ones when we can (root with apt-get), else say exactly what to run.
missing=""
have_header() {
	printf '#include <%s>\n' "$1" | ${CC:-cc} -E -x c - >/dev/null 2>&1
}
have_header liburing.h || missing="$missing liburing-dev"
have_header numa.h || missing="$missing libnuma-dev"
have_header criterion/criterion.h || missing="$missing libcriterion-dev"
have_header openssl/ssl.h || missing="$missing libssl-dev"
have_header ares.h || missing="$missing libc-ares-dev"
[ -z "$missing" ] && exit 0

echo "corio: missing packages:$missing"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "corio: installing them with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q && apt-get install -y -q $missing && exit 0
	echo "corio: apt-get failed; run it by hand: apt-get update && apt-get install -y$missing" >&2
	exit 1
fi
echo "corio: install them with: sudo apt-get update && sudo apt-get install -y$missing" >&2
exit 1
