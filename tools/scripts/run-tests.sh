#!/bin/sh
# Run every Criterion test binary in $1/test, the C examples of README.md
# and docs/, the docs' test names, and an install check; print one summary line at the end. Exit 1 on any failure.
B=$1 CC=$2 CFLAGS=$3 LIBS=$4
passed=0 failed=0 skipped=0 status=0
fails=$(mktemp) # the failing tests' names, repeated under the summary
export LSAN_OPTIONS="suppressions=$(pwd)/test/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# runtime::shared_library_runs_a_shard_when_dlopened loads this one
export CORIO_TEST_SO="$(pwd)/$B/libcorio.so"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"

for t in "$B"/test/test_*; do
	[ -x "$t" ] || continue
	[ -f "test/$(basename "$t").c" ] || continue # a stale binary of a moved source (test_net)
	if [ -n "${TESTS:-}" ]; then
		# a name selects its binary, and a suite split into files
		# (test_net_*.c: TESTS=net runs test_net_recv, test_net_send, ...)
		name=$(basename "$t" | sed 's/^test_//')
		case " $TESTS " in *" $name "* | *" ${name%%_*} "*) ;; *) continue ;; esac
	fi
	echo "== $(basename "$t")"
	out=$(mktemp)
	timeout 900 "$t" --jobs 2 >"$out" 2>&1
	rc=$?
	cat "$out"
	# each [FAIL] with the (up to 4) "[----]" lines before it: its messages
	awk -v t="$(basename "$t")" '/^\[----\]/ { m[n++ % 4] = $0 }
		/^\[FAIL\]/ { print t ": " $0; for (i = n > 4 ? n - 4 : 0; i < n; i++) print "    " m[i % 4]; n = 0 }' \
		"$out" >>"$fails"
	# "[====] Synthesis: Tested: N | Passing: N | Failing: N | Crashing: N"
	line=$(grep 'Synthesis:' "$out" | tail -n 1)
	rm -f "$out"
	if [ -z "$line" ]; then
		echo "!! $(basename "$t") printed no summary"
		echo "$(basename "$t"): printed no summary (exit $rc)" >>"$fails"
		failed=$((failed + 1)); status=1; continue
	fi
	p=$(echo "$line" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
	f=$(echo "$line" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
	c=$(echo "$line" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
	s=$(echo "$line" | sed -n 's/.*Skipped: \([0-9]*\).*/\1/p')
	if [ -z "$s" ]; then
		# Criterion leaves skipped tests out of "Tested": they are the
		# registered tests (--list) it did not test (the TSan shim says)
		n=$("$t" --list 2>/dev/null | grep -c '── ')
		tested=$(echo "$line" | sed -n 's/.*Tested: \([0-9]*\).*/\1/p')
		s=$(( ${n:-0} > ${tested:-0} ? ${n:-0} - ${tested:-0} : 0 ))
	fi
	passed=$((passed + p)); failed=$((failed + f + ${c:-0})); skipped=$((skipped + ${s:-0}))
	[ "$f" = 0 ] && [ "${c:-0}" = 0 ] || status=1
	if [ "$rc" != 0 ] && [ "$f" = 0 ] && [ "${c:-0}" = 0 ]; then
		echo "$(basename "$t"): exit $rc with every test passing" >>"$fails"
	fi
	[ "$rc" = 0 ] || status=1
done

# README examples, which moved to the docs/ pages: every ```c block with a
# main() in README.md or docs/*.md must compile (with the build's flags,
# -Werror included) and run. Each is named after its page and its place
# there (net-1.c: the first C block of docs/NET.md).
mkdir -p "$B/examples"
rm -f "$B"/examples/*.c
for page in README.md docs/*.md; do
	[ -f "$page" ] || continue
	base=$(basename "$page" .md | tr 'A-Z' 'a-z')
	awk -v dir="$B/examples" -v base="$base" '
		/^```c$/ { n++; f = sprintf("%s/%s-%d.c", dir, base, n); inb = 1; printf "" > f; next }
		/^```$/ && inb { inb = 0; close(f); next }
		inb { print >> f }
	' "$page"
done
# The README's in-tree build lines, as written there (an indented "cc ...
# -Iinclude prog.c build/libcorio.a ..." line): the plain one and the one a
# TLS program uses (with -lssl). Each example is built with that line, prog.c
# replaced by the example, build/ by this build's directory, and this build's
# flags appended (warnings as errors, a sanitizer's runtime); nothing is added
# to the libraries, so a line that stops linking fails here.
readme_line() { # $1: plain | tls
	awk -v want="$1" '/^    cc .*-Iinclude prog\.c build\/libcorio\.a/ {
		sub(/^    /, ""); tls = ($0 ~ / -lssl/)
		if ((want == "tls") == tls) { print; exit }
	}' README.md
}
line_plain=$(readme_line plain)
line_tls=$(readme_line tls)
examples=0
for src in "$B"/examples/*.c; do
	[ -f "$src" ] || continue
	grep -q 'int main' "$src" || continue
	bin=${src%.c}
	name=$(basename "$src")
	examples=$((examples + 1))
	line=$line_plain
	grep -q 'corio_tls_' "$src" && line=$line_tls
	if [ -z "$line" ]; then
		echo "[FAIL] README example $name: README.md has no in-tree build line" \
			"(an indented 'cc ... -Iinclude prog.c build/libcorio.a ...', $(grep -q 'corio_tls_' "$src" && echo 'with' || echo 'without') -lssl)"
		echo "[FAIL] README example $name: no README build line" >>"$fails"
		failed=$((failed + 1)); status=1; continue
	fi
	cmd=$(echo "$line" | sed -e "s|^cc |$CC |" -e "s|prog\.c|$src|" -e "s|build/libcorio\.a|$B/libcorio.a|")
	log=$(mktemp)
	# shellcheck disable=SC2086 # the README's line is split as a shell would
	# its stderr too is shown only when it fails: a shard preempted on a
	# loaded machine says so (corio: off-cpu:), which is no failure here
	if $cmd $CFLAGS -o "$bin" >"$log" 2>&1 && timeout 60 "$bin" >/dev/null 2>>"$log"; then
		echo "[PASS] README example $name"
		passed=$((passed + 1))
	else
		cat "$log"
		echo "[FAIL] README example $name (compile or run failed): $line"
		echo "[FAIL] README example $name" >>"$fails"
		failed=$((failed + 1)); status=1
	fi
	rm -f "$log"
done
if [ "$examples" = 0 ]; then # the extraction itself broke: say so
	echo "[FAIL] README example: no C example with a main() found"
	echo "[FAIL] README example: none found" >>"$fails"
	failed=$((failed + 1)); status=1
fi

# Every suite::name the docs cite as proof is a test that exists.
if log=$(sh tools/scripts/check-doc-tests.sh 2>&1); then
	echo "[PASS] docs: every test README.md and docs/*.md name exists"
	passed=$((passed + 1))
else
	echo "$log"
	echo "[FAIL] docs: a test the docs name does not exist (tools/scripts/check-doc-tests.sh)"
	echo "$log" | sed '$d' | sed 's/^/[FAIL] docs: /' >>"$fails"
	failed=$((failed + 1)); status=1
fi

# make install (into a scratch DESTDIR, with the flags of this build: make
# passes them down in MAKEFLAGS) puts the man pages, the tools and the examples where
# they belong, and every page renders: groff (or mandoc) where installed,
# else at least a .TH first line. Skipped when not run from make.
if [ -n "${MAKEFLAGS+set}" ] && [ -d docs ]; then
	inst=$(mktemp -d)
	log=$(mktemp)
	bad=
	if ${MAKE:-make} --no-print-directory install DESTDIR="$inst" PREFIX=/usr >"$log" 2>&1; then
		for f in usr/bin/corio-stat usr/bin/corio-kv usr/share/man/man3/corio.3 \
			usr/share/man/man3/corio-net.3 usr/share/man/man3/corio-timer.3 \
			usr/share/man/man1/corio-stat.1 usr/share/man/man1/corio-kv.1 \
			usr/bin/corio-httpd usr/bin/corio-https-get \
			usr/share/man/man1/corio-httpd.1 usr/share/man/man1/corio-https-get.1; do
			[ -e "$inst/$f" ] || bad="$bad missing:$f"
		done
		for f in "$inst"/usr/share/man/man*/*; do
			[ -f "$f" ] || continue
			head -n 1 "$f" | grep -q '^\.TH ' || bad="$bad no-.TH:$(basename "$f")"
			if command -v groff >/dev/null; then
				w=$(groff -man -Tutf8 -ww -z "$f" 2>&1)
			elif command -v mandoc >/dev/null; then
				w=$(mandoc -Tlint -Wwarning "$f" 2>&1)
			else
				w=
			fi
			[ -z "$w" ] || bad="$bad render:$(basename "$f")"
			[ -z "$w" ] || echo "$w" | head -n 5
		done
		${MAKE:-make} --no-print-directory uninstall DESTDIR="$inst" PREFIX=/usr >>"$log" 2>&1
		left=$(find "$inst" -type f | sed "s|^$inst/||")
		[ -z "$left" ] || bad="$bad left-after-uninstall:$(echo $left | tr ' ' ,)"
	else
		tail -n 20 "$log"
		bad=" make-install-failed"
	fi
	if [ -z "$bad" ]; then
		echo "[PASS] install: tools and man pages installed, rendered, uninstalled"
		passed=$((passed + 1))
	else
		echo "[FAIL] install:$bad"
		echo "[FAIL] install:$bad" >>"$fails"
		failed=$((failed + 1)); status=1
	fi
	rm -rf "$inst" "$log"
fi

echo
if [ -s "$fails" ]; then
	echo "failed:"
	sed 's/^/  /' "$fails"
fi
rm -f "$fails"
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
