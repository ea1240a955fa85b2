#!/bin/sh
# tools/scripts/check-doc-tests.sh [DOC...] - every test a doc names exists.
#
# The docs prove their promises by naming tests as suite::name
# (`net::reset_churn_ends_every_connection`); a renamed or removed test
# leaves such a name pointing at nothing. This reads every Test(suite, name)
# of test/*.c, including those a macro defines (a #define whose body holds
# Test(suite, PREFIX##param) and its uses, as FS_TEST(x) or
# CLOSE_READER_TEST(x, ...)), then every suite::name in the docs (README.md
# and docs/*.md unless DOCs are given). suite::prefix_* must match at least
# one test, suite:: and suite::* need the suite, and
# suite::prefix_{a,b} names suite::prefix_a and suite::prefix_b. Prints one line per miss,
# "DOC:LINE: SUITE::NAME: no Test(SUITE, NAME) in test/*.c", and exits 1.
set -eu

[ $# -gt 0 ] || set -- README.md docs/*.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

# The tests, one "suite::name" a line.
awk '
	function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
	# a #define (with its continuation lines joined) that expands to a Test()
	/^#[ \t]*define[ \t]+[A-Za-z_0-9]+\(/ {
		def = $0
		while (def ~ /\\$/ && (getline line) > 0) def = substr(def, 1, length(def) - 1) line
		if (match(def, /Test\([a-z_0-9]+,[ \t]*[A-Za-z_0-9#]+/)) {
			t = substr(def, RSTART + 5, RLENGTH - 5)
			suite = trim(substr(t, 1, index(t, ",") - 1))
			nm = trim(substr(t, index(t, ",") + 1))
			sub(/^#[ \t]*define[ \t]+/, "", def)
			mname = substr(def, 1, index(def, "(") - 1)
			params = substr(def, index(def, "(") + 1)
			params = substr(params, 1, index(params, ")") - 1)
			np = split(params, p, ",")
			nparts = split(nm, part, "##")
			for (i = 1; i <= np; i++) {
				for (k = 1; k <= nparts; k++) {
					if (trim(part[k]) != trim(p[i])) continue
					pre = ""; post = ""
					for (j = 1; j < k; j++) pre = pre trim(part[j])
					for (j = k + 1; j <= nparts; j++) post = post trim(part[j])
					msuite[mname] = suite; mpre[mname] = pre; mpost[mname] = post
					marg[mname] = i
				}
			}
		}
		next
	}
	{
		s = $0
		while (match(s, /(^|[^A-Za-z_0-9])Test\([a-z_0-9]+,[ \t]*[A-Za-z_0-9]+/)) {
			t = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
			sub(/^.*Test\(/, "", t)
			split(t, f, ",")
			print trim(f[1]) "::" trim(f[2])
		}
		# a use of a Test-defining macro at the start of a line
		if (match($0, /^[A-Za-z_0-9]+\(/)) {
			mname = substr($0, 1, RLENGTH - 1)
			if (mname in msuite) {
				args = substr($0, RLENGTH + 1)
				split(args, a, /[,)]/)
				print msuite[mname] "::" mpre[mname] trim(a[marg[mname]]) mpost[mname]
			}
		}
	}
' test/*.c | sort -u >"$tmp"

awk -v tests="$tmp" '
	BEGIN {
		while ((getline t < tests) > 0) {
			have[t] = 1
			split(t, f, "::"); suite[f[1]] = 1
		}
	}
	{
		s = $0
		while (match(s, /[a-z_0-9]+::[A-Za-z_0-9*]*/)) {
			ref = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
			# prefix_{a,b}: one name per alternative
			nalt = 1; alt[1] = ""
			if (s ~ /^\{[A-Za-z_0-9,]+\}/) {
				nalt = split(substr(s, 2, index(s, "}") - 2), alt, ",")
				s = substr(s, index(s, "}") + 1)
			}
			for (ai = 1; ai <= nalt; ai++)
				check(ref alt[ai])
		}
	}
	function check(ref,    f, sname, tname, ok, why, pat, t) {
		split(ref, f, "::")
		sname = f[1]; tname = f[2]
		ok = 0
		if (!(sname in suite)) {
			why = "no test suite \"" sname "\" in test/*.c"
		} else if (tname == "" || tname == "*") {
			ok = 1
		} else if (tname ~ /\*/) {
			pat = "^" sname "::" tname "$"; gsub(/\*/, "[A-Za-z_0-9]*", pat)
			for (t in have) if (t ~ pat) { ok = 1; break }
			why = "no Test(" sname ", " tname ") matches in test/*.c"
		} else {
			ok = (ref in have)
			why = "no Test(" sname ", " tname ") in test/*.c"
		}
		if (!ok) { printf "%s:%d: %s: %s\n", FILENAME, FNR, ref, why; bad++ }
	}
	END {
		if (bad) {
			printf "check-doc-tests: %d test name(s) in the docs name no test (renamed or removed?)\n", bad
			exit 1
		}
	}
' "$@"
