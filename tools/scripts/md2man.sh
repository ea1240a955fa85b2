#!/bin/sh
# md2man.sh PAGE.md NAME SECTION VERSION [HELP.txt] > NAME.SECTION
#
# Turn one docs/ page into a roff man page, so the man pages are the docs
# pages and never a third copy of a contract. The pages use a small subset
# of Markdown, and this knows only that subset:
#   "# Title"           .TH and the NAME section ("NAME \- Title"); text
#                       before the first "##" is the DESCRIPTION
#   "## H" / "### H"    .SH / .SS
#   ``` fences and      .nf/.fi, verbatim
#   4-space indents
#   "- item", "1. item" .IP with a bullet or the number; indented lines continue it
#   "| a | b |" tables  rows as plain text, cells split by two spaces
#   other lines         filled text; a blank line is .PP
# Inline marks are dropped: `code`, **bold**, [text](link) -> text.
# HELP.txt (a program's --help output) becomes the OPTIONS section (in
# place of the page's "## Options", which just says to run --help), so a
# tool's man page shows the options the binary really has.
# POSIX sh and awk only: no new build dependency.
set -eu
page=$1 name=$2 sect=$3 version=$4 help=${5:-}
[ -f "$page" ] || { echo "md2man.sh: no $page" >&2; exit 1; }
awk -v q="'" -v name="$name" -v sect="$sect" -v version="$version" -v help="$help" '
function esc(s) {
	gsub(/\\/, "\\e", s)
	# the non-ASCII the pages use, as troff names (groff without preconv)
	gsub(/—/, "\\(em", s); gsub(/–/, "\\(en", s); gsub(/×/, "\\(mu", s)
	gsub(/µ/, "\\(*m", s); gsub(/→/, "\\(->", s); gsub(/≥/, "\\(>=", s)
	gsub(/≤/, "\\(<=", s)
	if (substr(s, 1, 1) == "." || substr(s, 1, 1) == q) s = "\\&" s
	return s
}
function inl(s) {
	gsub(/\*\*/, "", s)
	gsub(/`/, "", s)
	while (match(s, /\[[^]]*\]\([^)]*\)/)) {
		t = substr(s, RSTART + 1, RLENGTH)
		sub(/\]\(.*/, "", t)
		s = substr(s, 1, RSTART - 1) t substr(s, RSTART + RLENGTH)
	}
	return esc(s)
}
function verb_on() { if (!verb) { print ".nf"; verb = 1 } }
function verb_off() { if (verb) { print ".fi"; verb = 0 } }
NR == 1 {
	t = $0; sub(/^# */, "", t)
	if (index(t, name ": ") == 1) t = substr(t, length(name) + 3) # "# corio-kv: a ..."
	printf ".TH %s %s \"\" \"corio %s\" \"corio manual\"\n", toupper(name), sect, version
	print ".SH NAME"
	print name " \\- " inl(t)
	next
}
# Text before the first heading: the introduction of the page, so NAME stays one
# line for whatis(1).
!intro && !/^#/ && !/^[ \t]*$/ { print ".SH DESCRIPTION"; intro = 1; para = 1 }
/^## / { intro = 1 }
# The "## Options" section of a tool page (it only says to run --help) becomes
# the --help output itself.
/^## / && help != "" { skip = 0 }
/^## Options *$/ && help != "" { verb_off(); put_help(); skip = 1; next }
skip { next }
/^```/ { if (fence) { verb_off(); fence = 0 } else { para = 0; verb_on(); fence = 1 } next }
fence { print esc($0); next }
/^    / && !item { para = 0; verb_on(); print esc(substr($0, 5)); next }
item && /^      / { verb_on(); print esc(substr($0, 7)); next }
/^[ \t]*$/ { verb_off(); item = 0; if (!para) { print ".PP"; para = 1 } next }
{ verb_off() }
/^###* / {
	h = $0; lvl = index(h, " ") - 1; sub(/^#* */, "", h)
	print (lvl == 2 ? ".SH " : ".SS ") "\"" (lvl == 2 ? toupper(inl(h)) : inl(h)) "\""
	para = 1; item = 0; next
}
/^\|/ {
	if ($0 ~ /^\|[-| :]*$/) next
	r = $0; sub(/^\| */, "", r); sub(/ *\|$/, "", r); gsub(/ *\| */, "  ", r)
	print inl(r); print ".br"; para = 0; next
}
/^- / { print ".IP \\(bu 2"; print inl(substr($0, 3)); item = 1; para = 0; next }
/^[0-9]+\. / { n = $0; sub(/\. .*/, ".", n); print ".IP " n " 3"; sub(/^[0-9]+\. /, ""); print inl($0); item = 1; para = 0; next }
item { sub(/^ */, ""); print inl($0); next }
{ sub(/^ */, ""); print inl($0); para = 0 }
function put_help(  l) {
	print ".SH OPTIONS"
	print "The program" q "s own \\-\\-help output:"
	print ".PP"
	print ".nf"
	while ((getline l < help) > 0) print esc(l)
	print ".fi"
	helped = 1
}
END {
	verb_off()
	if (help != "" && !helped)
		put_help()
}
' "$page"
