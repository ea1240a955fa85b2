#!/bin/sh
# tools/bench/bench-httpd.sh BUILD_DIR - the example httpd against nginx.
#
# Servers, both one worker pinned to CPU 1 (the load pinned to CPU 0), both
# serving the same three files from one temp dir (13 B, 4 KiB, 64 KiB):
#   httpd  tools/examples/httpd -s 1 (docs/HTTPD.md); the HTTPS rows start a
#          second one with --tls-cert/--tls-key
#   nginx  Debian's nginx-light, non-daemon, from a config generated in the
#          temp dir: worker_processes 1, access_log off, sendfile on,
#          tcp_nopush on, keepalive_requests far above any run's count; an
#          `ssl` listener beside the plain one for the HTTPS rows
# Rows (issues 25 and 26):
#   wrk keep-alive, 13 B and 4 KiB at 50 and 500 connections, 64 KiB at 50
#   HTTPS keep-alive (wrk), 13 B, 4 KiB and 64 KiB at 50 connections
#   full TLS handshakes: `openssl s_time -new` (a new connection and a full
#          handshake per request: -new never offers a session or ticket),
#          HS_CLIENTS of them at once, each fetching the 13-byte file (not
#          wrk with Connection: close: wrk SSL_clear()s and reuses its SSL
#          per connection slot, so it offers the last ticket and resumes)
# HTTPS: both servers hold the same ECDSA P-256 certificate made here; the
# clients run with an OpenSSL config that allows TLS 1.3 only, the one
# cipher TLS_AES_128_GCM_SHA256 and key exchange X25519, and a probe
# (s_client -brief) prints what each server negotiated. The HTTPS rows are
# skipped, with one line, when httpd --help lists no --tls-cert.
#
# Every run is checked: wrk runs a Lua script that counts responses that are
# not a 200 with the file's exact body length; a run with one of those, or
# any wrk error (connect, read, write, status, timeout), is reported and
# kept out of the table. s_time: every s_time exits 0 and its bytes read per
# connection equal one response a probe checked (200, the body).
#
# Per row the servers alternate (odd runs httpd first, even runs nginx
# first), REPS runs each; the table shows medians with ± half the min..max
# range in % of the median. Server CPU per request: the server's on-CPU time
# (every thread's /proc/PID/task/*/schedstat; nginx: master and worker) over
# the run / the responses wrk counted (per handshake: / connections).
# On 2 cores the client caps requests/s, so CPU per request is the goal's
# metric (issue 25: <= 0.85x nginx's, p99 at most nginx's; issue 26: HTTPS
# keep-alive <= 0.9x, handshakes/s >= 0.95x).
#
# Environment: BENCH_HTTPD_REPS (5), BENCH_HTTPD_SECS (2, per run),
# BENCH_HTTPD_HS_CLIENTS (4, parallel s_time), BENCH_HTTPD_BIN (the httpd
# to measure; default BUILD_DIR/tools/examples/httpd), BENCH_HTTPD_QUICK=1
# (one 1-second run of three rows: a smoke test), BENCH_HTTPD_SET=headline
# (what the default make bench shows, about 60 s: 13 B at 50 connections,
# 4 KiB at 500, HTTPS 4 KiB at 50, 3 runs each unless BENCH_HTTPD_REPS says;
# the default, full, is every row: make bench-httpd or make bench FULL=1).
B=${1:-build}
. "$(dirname "$0")/lib.sh"
HTTPD=${BENCH_HTTPD_BIN:-$B/tools/examples/httpd}
SET=${BENCH_HTTPD_SET:-full}
case "$SET" in
full) REPS=${BENCH_HTTPD_REPS:-5} ;;
headline) REPS=${BENCH_HTTPD_REPS:-3} ;;
*) echo "bench-httpd: BENCH_HTTPD_SET must be full or headline" >&2; exit 2 ;;
esac
SECS=${BENCH_HTTPD_SECS:-2}
HS_CLIENTS=${BENCH_HTTPD_HS_CLIENTS:-4}
[ -n "${BENCH_HTTPD_QUICK:-}" ] && { REPS=1; SECS=1; }
for v in "$REPS" "$SECS" "$HS_CLIENTS"; do
	case "$v" in ''|*[!0-9]*|0) echo "bench-httpd: BENCH_HTTPD_REPS, _SECS and _HS_CLIENTS must be positive integers" >&2; exit 2;; esac
done
if [ ! -x "$HTTPD" ]; then
	echo "bench-httpd: $HTTPD is missing; run make tools first" >&2
	exit 1
fi

# nginx (Debian's nginx-light), wrk, openssl: install them when we can (root
# with apt-get); without nginx or wrk there is nothing to compare.
PATH=$PATH:/usr/sbin
need=""
command -v nginx >/dev/null 2>&1 || need="$need nginx-light"
command -v wrk >/dev/null 2>&1 || need="$need wrk"
command -v openssl >/dev/null 2>&1 || need="$need openssl"
# shellcheck disable=SC2086
[ -n "$need" ] && apt_install bench-httpd $need 2>/dev/null
if ! command -v nginx >/dev/null 2>&1 || ! command -v wrk >/dev/null 2>&1; then
	echo "## httpd vs nginx: skipped: needs nginx and wrk (apt-get install nginx-light wrk)"
	exit 0
fi
TLS=1
if ! command -v openssl >/dev/null 2>&1; then
	TLS=0 TLS_WHY="openssl is not installed (apt-get install openssl)"
elif ! "$HTTPD" --help 2>&1 | grep -q -- '--tls-cert'; then
	TLS=0 TLS_WHY="$HTTPD --help lists no --tls-cert"
fi

if [ "$(nproc)" -ge 2 ]; then SCPU=1; LCPU=0; else SCPU=0; LCPU=0; fi
OUT=bench-results/httpd-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT" || exit 1
TMP=$(mktemp -d /tmp/bench-httpd.XXXXXX) || exit 1
ROWS=$OUT/rows.tsv
: > "$ROWS"
H_PID='' HT_PID='' N_PID=''
cleanup() {
	for pid in $H_PID $HT_PID $N_PID; do kill -TERM "$pid" 2>/dev/null; done
	for pid in $H_PID $HT_PID $N_PID; do wait "$pid" 2>/dev/null; done
	H_PID='' HT_PID='' N_PID=''
	rm -rf "$TMP"
}
trap 'cleanup; exit 130' INT TERM

# ---- the files, the certificate, the client's TLS settings, the wrk script --
WWW=$TMP/www
mkdir -p "$WWW" "$TMP/nginx"
# nginx's worker drops root for nobody / www-data: everything it serves is world-readable
chmod 755 "$TMP" "$WWW"
printf 'Hello, world\n' > "$WWW/13.txt"
head -c 4096 /dev/urandom > "$WWW/4k.bin"
head -c 65536 /dev/urandom > "$WWW/64k.bin"
if [ $TLS = 1 ] && ! openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-keyout "$TMP/key.pem" -out "$TMP/cert.pem" -days 2 -subj /CN=localhost \
	> "$OUT/openssl-req.txt" 2>&1; then
	TLS=0 TLS_WHY="openssl could not make an ECDSA P-256 certificate ($OUT/openssl-req.txt)"
fi
# The clients (wrk, s_time, s_client) read this instead of the system's
# openssl.cnf: TLS 1.3 only, one cipher, one group, so both servers speak
# the same protocol whatever their own defaults are.
cat > "$TMP/client.cnf" <<'EOF'
openssl_conf = openssl_init
[openssl_init]
ssl_conf = ssl_module
[ssl_module]
system_default = tls_client
[tls_client]
MinProtocol = TLSv1.3
Ciphersuites = TLS_AES_128_GCM_SHA256
Groups = X25519
EOF
cat > "$TMP/check.lua" <<'EOF'
-- every response: status 200 and a body of the length given after `--`
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) want = tonumber(args[1]); checked = 0; bad = 0 end
function response(status, headers, body)
	checked = checked + 1
	if status ~= 200 or body == nil or #body ~= want then bad = bad + 1 end
end
function done(summary, latency, requests)
	local c, b = 0, 0
	for _, t in ipairs(threads) do c = c + t:get("checked"); b = b + t:get("bad") end
	local e = summary.errors
	io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d " ..
		"connect=%d read=%d write=%d status=%d timeout=%d checked=%d bad=%d\n",
		summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
		e.connect, e.read, e.write, e.status, e.timeout, c, b))
end
EOF

# ---- the servers ---------------------------------------------------------------
N_PORT=$(free_port)
N_TPORT=$N_PORT
while [ "$N_TPORT" = "$N_PORT" ] || port_used "$N_TPORT"; do N_TPORT=$(free_port); done
nginx_conf() {
	cat <<EOF
worker_processes 1;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 1000000000;
	keepalive_timeout 60s;
	types { text/plain txt; }
	default_type application/octet-stream;
	client_body_temp_path $TMP/nginx/body;
	proxy_temp_path $TMP/nginx/proxy;
	fastcgi_temp_path $TMP/nginx/fastcgi;
	uwsgi_temp_path $TMP/nginx/uwsgi;
	scgi_temp_path $TMP/nginx/scgi;
	server { listen 127.0.0.1:$N_PORT; root $WWW; }
EOF
	[ $TLS = 1 ] && cat <<EOF
	server {
		listen 127.0.0.1:$N_TPORT ssl;
		root $WWW;
		ssl_certificate $TMP/cert.pem;
		ssl_certificate_key $TMP/key.pem;
		ssl_protocols TLSv1.3;
		ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;
	}
EOF
	echo "}"
}
nginx_conf > "$TMP/nginx/nginx.conf"

# start_httpd VAR ARGS...: httpd on port 0 pinned to SCPU; waits for its
# "listening on" line and sets VAR_PID and VAR_PORT (VAR: H or HT).
start_httpd() {
	v=$1
	shift
	: > "$TMP/$v.out" # before the background redirect makes it: sed reads it at once
	taskset -c $SCPU "$HTTPD" -d "$WWW" -p 0 -s 1 "$@" > "$TMP/$v.out" 2> "$OUT/$v.err" &
	eval "${v}_PID=$!"
	i=0
	while [ $i -lt 50 ]; do
		port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/$v.out")
		if [ -n "$port" ] && port_listening "$port"; then
			eval "${v}_PORT=$port"
			return 0
		fi
		sleep 0.1
		i=$((i + 1))
	done
	echo "bench-httpd: $HTTPD $* did not start listening: $(cat "$OUT/$v.err")" >&2
	return 1
}

start_nginx() {
	taskset -c $SCPU nginx -p "$TMP/nginx/" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" \
		> "$OUT/nginx.out" 2>&1 &
	N_PID=$!
	i=0
	while [ $i -lt 50 ]; do
		if port_listening "$N_PORT" && { [ $TLS = 0 ] || port_listening "$N_TPORT"; }; then
			return 0
		fi
		kill -0 $N_PID 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	echo "bench-httpd: nginx did not start listening on $N_PORT: $(cat "$OUT/nginx.out" "$TMP/nginx/error.log" 2>/dev/null)" >&2
	return 1
}

# nginx_pids: the master and its workers (the workers do the serving).
nginx_pids() {
	echo $N_PID
	for f in /proc/[0-9]*/stat; do
		# "pid (comm) state ppid ...": the comm may hold spaces, cut it off
		s=$(cat "$f" 2>/dev/null) || continue
		s=${s##*) }
		set -- $s
		[ "$2" = "$N_PID" ] && { f=${f#/proc/}; echo "${f%/stat}"; }
	done
}

if ! start_httpd H || ! start_nginx; then
	cleanup
	exit 1
fi
N_PIDS=$(nginx_pids | tr '\n' ' ')
if [ $TLS = 1 ] && ! start_httpd HT --tls-cert "$TMP/cert.pem" --tls-key "$TMP/key.pem"; then
	TLS=0 TLS_WHY="httpd --tls-cert did not start"
fi

# ---- one run ---------------------------------------------------------------------
# row CASE SIDE REP req/s p99_us cpu_ns/req
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" >> "$ROWS"; }

# side_of SIDE SCHEME: sets PORT and PIDS of that server.
side_of() {
	case $1-$2 in
	httpd-http) PORT=$H_PORT PIDS=$H_PID ;;
	httpd-https) PORT=$HT_PORT PIDS=$HT_PID ;;
	nginx-http) PORT=$N_PORT PIDS=$N_PIDS ;;
	nginx-https) PORT=$N_TPORT PIDS=$N_PIDS ;;
	esac
}

# wrk_run CASE SIDE REP SCHEME FILE BYTES CONNS: one checked wrk run.
wrk_run() {
	side_of "$2" "$4"
	c0=$(cpu_ns $PIDS)
	OPENSSL_CONF=$TMP/client.cnf taskset -c $LCPU wrk -t1 -c"$7" -d"$SECS"s --timeout 5s \
		-s "$TMP/check.lua" "$4://127.0.0.1:$PORT/$5" -- "$6" > "$OUT/wrk.txt" 2>&1
	c1=$(cpu_ns $PIDS)
	r=$(sed -n 's/^RESULT //p' "$OUT/wrk.txt")
	cat "$OUT/wrk.txt" >> "$OUT/wrk-all.txt"
	if [ -z "$r" ]; then
		echo "bench-httpd: $1, $2, run $3: wrk printed no result: $(tail -3 "$OUT/wrk.txt")" >&2
		return 1
	fi
	case "$r" in *[!a-z0-9_=\ ]*) r= ;; esac
	requests=
	eval "$r" # requests=N duration_us=N ... bad=N, digits only (checked above)
	# shellcheck disable=SC2154
	if [ -z "$requests" ] || [ "$bad" != 0 ] || [ "$checked" != "$requests" ] || [ "$requests" = 0 ] ||
		[ $((connect + read + write + status + timeout)) != 0 ]; then
		echo "bench-httpd: $1, $2, run $3: responses not clean (kept out of the table): $r" >&2
		return 1
	fi
	# shellcheck disable=SC2154
	row "$1" "$2" "$3" "$(awk -v n="$requests" -v d="$duration_us" 'BEGIN { printf "%.0f", n * 1e6 / d }')" \
		"$p99_us" "$(awk -v c=$((c1 - c0)) -v n="$requests" 'BEGIN { printf "%.0f", c / n }')"
}

# probe SIDE: one HTTP/1.0 request over TLS with s_client; prints the
# response's byte count when it is a 200 ending in the 13-byte body, and
# keeps what was negotiated in $OUT/probe-SIDE.txt.
probe() {
	side_of "$1" https
	printf 'GET /13.txt HTTP/1.0\r\n\r\n' | OPENSSL_CONF=$TMP/client.cnf timeout 10 \
		openssl s_client -connect 127.0.0.1:$PORT -servername localhost -brief -ign_eof \
		> "$TMP/probe.out" 2> "$OUT/probe-$1.txt"
	if head -n 1 "$TMP/probe.out" | grep -q '^HTTP/1\.[01] 200' &&
		[ "$(tail -c 13 "$TMP/probe.out")" = "Hello, world" ]; then
		wc -c < "$TMP/probe.out"
	fi
}

# hs_run CASE SIDE REP: HS_CLIENTS `openssl s_time -new` at once for SECS;
# handshakes/s over the wall time, server CPU per handshake.
hs_run() {
	side_of "$2" https
	want=$(eval echo "\$PROBE_$2")
	c0=$(cpu_ns $PIDS)
	t0=$(date +%s%N)
	pids=
	i=1
	while [ $i -le "$HS_CLIENTS" ]; do
		OPENSSL_CONF=$TMP/client.cnf taskset -c $LCPU openssl s_time -connect 127.0.0.1:$PORT \
			-new -www /13.txt -time "$SECS" > "$TMP/st.$i" 2>&1 &
		pids="$pids $!"
		i=$((i + 1))
	done
	fail=0
	for p in $pids; do wait "$p" || fail=1; done
	t1=$(date +%s%N)
	c1=$(cpu_ns $PIDS)
	cat "$TMP"/st.* >> "$OUT/s_time-all.txt"
	# "N connections in T real seconds, B bytes read per connection"
	n=$(cat "$TMP"/st.* | awk -v w="$want" '
		/real seconds,/ { n += $1; for (i = 2; i <= NF; i++) if ($i == "bytes" && $(i - 1) != w) bad++ }
		END { if (bad) n = -1; print n + 0 }')
	if [ $fail = 1 ] || [ "$n" -le 0 ] || [ -z "$want" ]; then
		echo "bench-httpd: $1, $2, run $3: s_time failed or read other than $want bytes per connection:" >&2
		tail -n 2 "$TMP"/st.* | sed 's/^/  /' >&2
		return 1
	fi
	row "$1" "$2" "$3" "$(awk -v n="$n" -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", n * 1e9 / t }')" \
		-1 "$(awk -v c=$((c1 - c0)) -v n="$n" 'BEGIN { printf "%.0f", c / n }')"
}

# bench CASE KIND ARGS...: REPS runs of each server, alternated, the first
# side swapped every run; a failed run is retried once.
bench() {
	c=$1 kind=$2
	shift 2
	rep=1
	while [ $rep -le "$REPS" ]; do
		if [ $((rep % 2)) = 1 ]; then order="httpd nginx"; else order="nginx httpd"; fi
		for side in $order; do
			$kind "$c" $side $rep "$@" || $kind "$c" $side $rep "$@" ||
				echo "bench-httpd: $c, $side, run $rep failed twice (kept out of the table)" >&2
		done
		rep=$((rep + 1))
	done
}

# ---- the runs ----------------------------------------------------------------------
echo "## httpd vs nginx (tools/bench/bench-httpd.sh)"
echo "$(nginx -v 2>&1 | sed 's/.*: //') (nginx-light: 1 worker, access_log off, sendfile on, tcp_nopush on)"
echo "against $HTTPD -s 1; both pinned to CPU $SCPU, wrk -t1 pinned to CPU $LCPU; 127.0.0.1;"
echo "$REPS alternated runs of ${SECS} s per row, medians ± half the min..max range;"
echo "every response checked (200, exact body length; wrk's error counters 0). kernel $(uname -r), $(nproc) CPUs."
[ "$SET" = headline ] && echo "Rows: the headline set (BENCH_HTTPD_SET=headline); every row, 64 KiB and full handshakes: make bench-httpd."
echo "Results: $OUT/"
start=$(date +%s)
# warm both up (first-touch of 500 connections' memory, page cache)
for p in $H_PORT $N_PORT; do
	taskset -c $LCPU wrk -t1 -c500 -d1s "http://127.0.0.1:$p/4k.bin" > /dev/null 2>&1
done
if [ -n "${BENCH_HTTPD_QUICK:-}" ]; then
	bench "13 B, 50 conns" wrk_run http 13.txt 13 50
elif [ "$SET" = headline ]; then
	bench "13 B, 50 conns" wrk_run http 13.txt 13 50
	bench "4 KiB, 500 conns" wrk_run http 4k.bin 4096 500
else
	for f in "13.txt 13 13 B" "4k.bin 4096 4 KiB"; do
		set -- $f
		for n in 50 500; do bench "$3 $4, $n conns" wrk_run http "$1" "$2" $n; done
	done
	bench "64 KiB, 50 conns" wrk_run http 64k.bin 65536 50
fi
if [ $TLS = 1 ]; then
	# shellcheck disable=SC2034 # read through eval (hs_run, below)
	PROBE_httpd=$(probe httpd)
	# shellcheck disable=SC2034
	PROBE_nginx=$(probe nginx)
	for s in httpd nginx; do
		echo "$s over TLS: $(grep -E 'Protocol version|Ciphersuite|Signature type|Server Temp Key' \
			"$OUT/probe-$s.txt" | sed 's/^[^:]*: //' | tr '\n' ' ')"
	done
	# a server that does not answer the probe (200, the body, over TLS 1.3
	# with the one cipher) would only fill the rows with failed runs
	for s in httpd nginx; do
		if [ $TLS = 1 ] && [ -z "$(eval echo "\$PROBE_$s")" ]; then
			TLS=0 TLS_WHY="$s did not answer a TLS 1.3 TLS_AES_128_GCM_SHA256 probe: $(grep -m1 -i 'error\|alert' "$OUT/probe-$s.txt")"
		fi
	done
fi
if [ $TLS = 1 ]; then
	# what the clients allow, so what a probe that passed negotiated
	t="TLS 1.3 AES_128_GCM_SHA256, ECDSA P-256 cert, X25519"
	if [ "$SET" = headline ]; then
		bench "HTTPS 4 KiB, 50 conns ($t)" wrk_run https 4k.bin 4096 50
	else
		bench "HTTPS 13 B, 50 conns ($t)" wrk_run https 13.txt 13 50
		[ -z "${BENCH_HTTPD_QUICK:-}" ] && bench "HTTPS 4 KiB, 50 conns ($t)" wrk_run https 4k.bin 4096 50
		# issue 26: over TLS the file is read, encrypted and written; this row is that path
		[ -z "${BENCH_HTTPD_QUICK:-}" ] && bench "HTTPS 64 KiB, 50 conns ($t)" wrk_run https 64k.bin 65536 50
		bench "full handshakes, $HS_CLIENTS x s_time -new ($t)" hs_run
	fi
fi
end=$(date +%s)
for s in H HT N; do
	pid=$(eval echo "\$${s}_PID")
	[ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && echo "bench-httpd: a server ($s) died during the runs" >&2
done
cleanup

# ---- the table ------------------------------------------------------------------
echo
awk -F'\t' '
function med(list,   n, a, i, j, x) {
	n = split(list, a, " ")
	if (n == 0) { MIN = MAX = ""; N = 0; return "" }
	for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
	MIN = a[1]; MAX = a[n]; N = n
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function cell(c, s, f, div, fmt,   m) {
	m = med(v[c SUBSEP s, f])
	M[s] = m
	if (m == "" || m < 0) return "-"
	return sprintf(fmt, m / div) (m > 0 ? sprintf(" ±%.0f%%", 100 * (MAX - MIN) / 2 / m) : "") (N < reps ? " (" N " runs)" : "")
}
function ratio(a, b) { return (a != "" && a >= 0 && b > 0) ? sprintf("%.2f", a / b) : "-" }
function verdict(r, op, goal) {
	if (r == "-") return "-"
	return ((op == "<=" ? r + 0 <= goal : r + 0 >= goal) ? "met" : "**not met**")
}
{ if (!($1 in seen)) { seen[$1] = 1; order[++nc] = $1 } for (f = 4; f <= 6; f++) v[$1 SUBSEP $2, f] = v[$1 SUBSEP $2, f] " " $f }
END {
	print "| row | server CPU/request httpd | nginx | httpd/nginx | goal | requests/s httpd | nginx | p99 us httpd | nginx | p99 goal |"
	print "|---|---|---|---|---|---|---|---|---|---|"
	for (i = 1; i <= nc; i++) {
		c = order[i]
		hs = c ~ /handshake/
		ch = cell(c, "httpd", 6, 1000, "%.2f us"); cn = cell(c, "nginx", 6, 1000, "%.2f us")
		rc = ratio(M["httpd"], M["nginx"])
		rh = cell(c, "httpd", 4, 1, "%.0f"); rn = cell(c, "nginx", 4, 1, "%.0f")
		rr = ratio(M["httpd"], M["nginx"])
		ph = cell(c, "httpd", 5, 1, "%.0f"); pn = cell(c, "nginx", 5, 1, "%.0f")
		pr = ratio(M["httpd"], M["nginx"])
		if (hs) { g = "handshakes/s >= 0.95x: " verdict(rr, ">=", 0.95) " (" rr "x)"; pg = "-" }
		else {
			lim = c ~ /^HTTPS/ ? 0.9 : 0.85
			g = "<= " lim "x: " verdict(rc, "<=", lim)
			pg = c ~ /^HTTPS/ ? "-" : "<= 1x: " verdict(pr, "<=", 1) " (" pr "x)"
		}
		printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c, ch, cn, rc, g, rh, rn, ph, pn, pg
	}
}' reps="$REPS" "$ROWS" | tee "$OUT/table.md"
echo
echo "Server CPU/request: schedstat over the run / responses (handshakes row: / connections,"
echo "each one full TLS 1.3 handshake + one GET of 13 B). ±: half the min..max range over the"
echo "runs in % of the median. $(($(wc -l < "$ROWS"))) clean runs kept; $((end - start)) s."
[ $TLS = 1 ] || echo "HTTPS rows: skipped: $TLS_WHY"
exit 0
