#!/bin/sh
# tools/scripts/check-layout.sh OBJDIR [TOOLOBJ...] - prove the layering from symbols.
#
# corio's areas call each other one way only:
#
#   tools -> include -> ctl -> tls -> net, fs -> core -> timer -> uring -> liburing
#
# Every library object lives in OBJDIR/AREA/NAME.o. This script reads each
# object's defined and undefined symbols (nm), finds which area defines each
# symbol an object uses, and fails on every use that runs up the arrows (or
# sideways, net <-> fs). Tool objects (the other arguments) may use only the
# public API: no corio__ internal symbol. With -v it prints the area-to-area
# graph it found and the file-level edges behind each count.
#
# Static inline functions in private headers leave no symbol; includes of a
# higher area's private header are checked separately (grep), since reading
# another area's private struct is a tie even when no call is made.
set -eu

verbose=0
if [ "${1:-}" = "-v" ]; then verbose=1; shift; fi
obj=${1:?usage: check-layout.sh [-v] OBJDIR [TOOL.o ...]}
shift

# rank: an area may use only areas of strictly lower rank (net and fs share
# a rank, so neither may use the other).
rank() {
	case $1 in
	uring) echo 1 ;; timer) echo 2 ;; core) echo 3 ;;
	net | fs) echo 4 ;; tls) echo 5 ;; ctl) echo 6 ;; *) echo 0 ;;
	esac
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# symbol table: "defined SYMBOL AREA FILE" and "uses SYMBOL AREA FILE"
for o in "$obj"/*/*.o; do
	[ -f "$o" ] || continue
	area=$(basename "$(dirname "$o")")
	file=$area/$(basename "$o" .o).c
	[ -f "$file" ] || continue # a stale object of a removed source
	nm --defined-only -g "$o" | awk -v a="$area" -v f="$file" '{ print "def", $3, a, f }'
	nm -u "$o" | awk -v a="$area" -v f="$file" '{ print "use", $2, a, f }'
done >"$tmp/syms"

# ranks as a lookup file for awk
for a in uring timer core net fs tls ctl; do echo "$a $(rank $a)"; done >"$tmp/ranks"

status=0
awk -v verbose=$verbose '
	FILENAME == ARGV[1] { rank[$1] = $2; next }
	$1 == "def" { defarea[$2] = $3; deffile[$2] = $4; next }
	$1 == "use" { n++; usym[n] = $2; uarea[n] = $3; ufile[n] = $4 }
	END {
		bad = 0
		for (i = 1; i <= n; i++) {
			s = usym[i]
			if (!(s in defarea))
				continue               # libc, liburing, libnuma
			from = uarea[i]; to = defarea[s]
			if (from == to)
				continue
			edge[from " -> " to]++
			if (!(rank[to] < rank[from])) {
				printf "layout: %s uses %s from %s (%s may not call %s)\n",
				       ufile[i], s, deffile[s], from, to
				bad++
			} else if (verbose)
				detail[from " -> " to] = detail[from " -> " to] " " ufile[i] ":" s
		}
		if (verbose) {
			print "area graph (symbol uses):"
			for (e in edge)
				printf "  %-16s %d\n", e, edge[e]
		}
		exit bad ? 1 : 0
	}
' "$tmp/ranks" "$tmp/syms" || status=1

# Private headers: AREA/internal.h (or any header) of a higher area.
for src in uring/*.[ch] timer/*.[ch] core/*.[ch] net/*.[ch] fs/*.[ch] tls/*.[ch] ctl/*.[ch]; do
	[ -f "$src" ] || continue
	from=${src%%/*}
	grep -o '^#include "[a-z]*/[a-z_]*\.h"' "$src" | sed 's/.*"\([a-z]*\)\/.*/\1/' |
		while read -r to; do
			[ "$to" = "$from" ] && continue
			[ "$to" = corio ] && continue # the public headers
			if [ "$(rank "$to")" -ge "$(rank "$from")" ]; then
				echo "layout: $src includes a header of $to ($from may not use $to)"
			fi
		done
done >"$tmp/inc"
if [ -s "$tmp/inc" ]; then
	cat "$tmp/inc"
	status=1
fi

# liburing: only uring/ calls its library functions (set-up, enter, buffer-ring
# registration, exit). The areas above fill the SQEs uring/ hands them with
# liburing's static inline helpers (io_uring_prep_*), which leave no symbol.
for o in "$obj"/*/*.o; do
	[ -f "$o" ] || continue
	area=$(basename "$(dirname "$o")")
	[ "$area" = uring ] && continue
	[ -f "$area/$(basename "$o" .o).c" ] || continue
	nm -u "$o" | awk -v f="$area/$(basename "$o" .o).c" '$2 ~ /^_*io_uring_/ {
		printf "layout: %s calls liburing'"'"'s %s (only uring/ may)\n", f, $2; bad = 1 }
		END { exit bad ? 1 : 0 }' || status=1
done

# Tools and examples: the public API only, in what they include...
for src in tools/*/*.[ch] tools/*/*/*.[ch]; do
	[ -f "$src" ] || continue
	grep -Hn '^#include "\(uring\|timer\|core\|net\|fs\|tls\|ctl\)/' "$src" |
		sed 's/^/layout: a tool includes a private header: /'
done >"$tmp/tools"
if [ -s "$tmp/tools" ]; then
	cat "$tmp/tools"
	status=1
fi
# ... and in what their objects call.
for o in "$@"; do
	[ -f "$o" ] || continue
	nm -u "$o" | awk -v f="$o" '$2 ~ /^corio__/ { printf "layout: %s uses internal %s\n", f, $2; bad = 1 }
		END { exit bad ? 1 : 0 }' || status=1
done

if [ $status = 0 ]; then
	echo "layout: ok (tools -> include -> ctl -> tls -> net, fs -> core -> timer -> uring)"
fi
exit $status
