# corio - build, test, bench, install.
#
#   make            libcorio.a, libcorio.so (versioned), corio.pc, the tools
#   make test       install missing Debian packages, build, run every test
#   make bench      install missing Debian packages, build, run the headline
#                   comparisons (echo, httpd, kv against their baselines;
#                   about 4 minutes); FULL=1: every benchmark (about 20)
#   make bench-AREA one area in full: echo, httpd, kv, kvsave, proxy
#                   (tcp-proxy against haproxy), micro (every
#                   micro-benchmark), core, fs, msg, net, sched, sendfile,
#                   timer, tls
#   make install    PREFIX=/usr/local DESTDIR= (BINDIR, MANDIR, ... too):
#                   the library, headers, corio.pc, corio-stat, corio-kv
#                   and the man pages; make uninstall removes them
#   make man        the man pages in $(B)/man, generated from docs/
#   make DEBUG=1    keep the asserts (build/debug): API misuse that release
#                   builds answer with -EPERM/-EINVAL and a message aborts
#                   with that message instead. Release builds (the default,
#                   make install, make test) pass -DNDEBUG; SAN builds keep
#                   the asserts.
#   make test SAN=address   ASan+UBSan build in build/asan
#   make test SAN=thread    TSan build in build/tsan
#   V=1             show the commands
#   WERROR=1        warnings are errors (CI sets it)
#   TESTS="a b"     make test runs only test/test_a and test/test_b (and a suite
#                   split into files: TESTS=net runs every test/test_net_*)
#   make check-layout  prove from the objects' symbols that calls run one way:
#                      tools -> include -> ctl -> tls -> net, fs -> core -> timer -> uring
#   make soak SECS=N   corio-echo under N seconds of connection churn per accept
#                      model; fds, fibers, connections, buffers must come back
#   make test FAULTS=1 fault injection (uring/fault.h) in build/faults: the suites
#                      run with CORIO_FAULTS (default seed=1,rate=0.02,
#                      kinds=transparent; FAULTS="seed=..." sets it) and the
#                      faults injected per kind are printed at the end
#   make fuzz SECS=N   build the libFuzzer targets in test/fuzz (clang, ASan+UBSan)
#                      and run each for N seconds (10) from test/fuzz/seeds

# Every rule is written out below; no built-in rule may guess (one would try
# to compile a missing .d file from a .c of the same name).
MAKEFLAGS += --no-builtin-rules
.SUFFIXES:

VERSION   := 0.1.0
SOVERSION := 0

PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PCDIR      ?= $(LIBDIR)/pkgconfig
BINDIR     ?= $(PREFIX)/bin
MANDIR     ?= $(PREFIX)/share/man

CFLAGS ?= -O2 -g
SAN    ?=
WERROR ?=
DEBUG  ?=

TEST_CFLAGS :=
TEST_LIBS := -lcriterion
# Release unless DEBUG=1 or a sanitizer build: asserts guard internal
# invariants only, and API misuse returns what the headers say
# (corio__misuse() in core/internal.h aborts only without NDEBUG).
NDEBUG_FLAG := -DNDEBUG
ifeq ($(SAN),)
ifneq ($(DEBUG),)
B := build/debug
NDEBUG_FLAG :=
else
B := build
endif
else ifeq ($(SAN),address)
B := build/asan
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else ifeq ($(SAN),thread)
B := build/tsan
SANFLAGS := -fsanitize=thread
# Criterion cannot start under TSan (its issue #274): test/crit_shim.h stands in.
TEST_CFLAGS := -DCORIO_TEST_SHIM
TEST_LIBS :=
else
$(error SAN must be empty, address or thread)
endif
ifneq ($(SAN),)
NDEBUG_FLAG :=
endif

# Fault injection: its own build dir, so the normal objects never carry it.
FAULTS ?=
comma := ,
ifneq ($(FAULTS),)
B := $(B)/faults
SANFLAGS += -DCORIO_FAULTS
FAULTS_SPEC := $(if $(filter 1,$(FAULTS)),seed=1$(comma)rate=0.02$(comma)kinds=transparent,$(FAULTS))
endif

WARN := -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wshadow -Wno-unused-parameter
# A frame larger than a fiber's stack guard must touch each page on its way
# down, so it faults in the guard instead of writing past it into the next
# stack (gcc >= 8, clang >= 11; probed, so an older compiler still builds).
STACK_CLASH := $(shell $(CC) -fstack-clash-protection -Werror -x c -c /dev/null \
		-o /dev/null 2>/dev/null && echo -fstack-clash-protection)
override CFLAGS += -std=gnu11 $(WARN) $(SANFLAGS) $(NDEBUG_FLAG) $(STACK_CLASH) -D_GNU_SOURCE -Iinclude -I. -MMD -MP
ifneq ($(WERROR),)
override CFLAGS += -Werror
endif
override LDFLAGS += $(SANFLAGS)
LIBS := -luring -lnuma -lpthread -lssl -lcrypto -lcares

ifeq ($(V),1)
Q :=
quiet = @true
else
Q := @
quiet = @printf '  %-6s %s\n'
endif

LIB_SRCS  := $(sort $(wildcard uring/*.c timer/*.c core/*.c net/*.c fs/*.c tls/*.c ctl/*.c))
LIB_OBJS  := $(LIB_SRCS:%.c=$(B)/obj/%.o)
# tools/: common/ (code the tools share), kv/ (corio-kv), load/ (load
# generators and baseline servers), bench/ (micro-benchmarks, corio-echo and
# the drivers), stat/ (corio-stat), examples/, scripts/ (build and CI).
# Every program is built to $(B)/tools/NAME, examples to $(B)/tools/examples/.
TOOL_DIRS := tools/load tools/bench tools/stat
TOOL_LIB  := $(sort $(wildcard tools/common/*.c))
TOOL_LOBJ := $(TOOL_LIB:%.c=$(B)/obj/%.o)
TOOL_SRCS := $(sort $(foreach d,$(TOOL_DIRS),$(wildcard $(d)/*.c)))
TOOL_BINS := $(addprefix $(B)/tools/,$(basename $(notdir $(TOOL_SRCS))))
vpath %.c $(TOOL_DIRS)
# corio-kv and upper-echo are folders of units linked through their headers
# (tools/kv/kv.h, tools/examples/upper-echo/upper.h); their tests link every
# unit but main.o. corio-load too (tools/load/corio-load/load.h).
KV_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(sort $(wildcard tools/kv/*.c)))
LOAD_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(sort $(wildcard tools/load/corio-load/*.c)))
UE_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(sort $(wildcard tools/examples/upper-echo/*.c)))
HTTPD_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(sort $(wildcard tools/examples/httpd/*.c)))
GET_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(sort $(wildcard tools/examples/https-get/*.c)))
PROXY_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(sort $(wildcard tools/examples/tcp-proxy/*.c)))
TOOL_BINS += $(B)/tools/corio-kv $(B)/tools/corio-load $(B)/tools/examples/upper-echo $(B)/tools/examples/httpd \
	$(B)/tools/examples/https-get $(B)/tools/examples/tcp-proxy
# The examples make install puts in BINDIR as corio-NAME.
EXAMPLES_INST := httpd https-get
TEST_SRCS := $(sort $(wildcard test/test_*.c))
TEST_BINS := $(TEST_SRCS:test/%.c=$(B)/test/%)

STATIC := $(B)/libcorio.a
SHARED := $(B)/libcorio.so.$(VERSION)

.PHONY: all lib tools tests test bench fuzz soak check-layout install uninstall clean deps check-headers man
all: lib $(B)/corio.pc tools man

lib: $(STATIC) $(SHARED)

tools: $(TOOL_BINS)

tests: $(TEST_BINS) check-headers

deps:
	$(Q)sh tools/scripts/deps.sh

# The flags objects were built with: when they change (DEBUG=1 here, -DNDEBUG
# dropped), every object is rebuilt instead of mixing asserting and release
# objects in one library.
$(B)/.cflags: FORCE
	@mkdir -p $(B)
	@echo '$(filter-out -Werror,$(CFLAGS))' | cmp -s - $@ || echo '$(filter-out -Werror,$(CFLAGS))' > $@
.PHONY: FORCE

$(B)/obj/%.o: %.c $(B)/.cflags
	$(quiet) CC $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

$(STATIC): $(LIB_OBJS)
	$(quiet) AR $@
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(SHARED): $(LIB_OBJS) corio.map
	$(quiet) LD $@
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,-soname,libcorio.so.$(SOVERSION) \
		-Wl,--version-script=corio.map -o $@ $(LIB_OBJS) $(LIBS)
	$(Q)ln -sf libcorio.so.$(VERSION) $(B)/libcorio.so.$(SOVERSION)
	$(Q)ln -sf libcorio.so.$(SOVERSION) $(B)/libcorio.so

PC_SED = sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|'

$(B)/corio.pc: corio.pc.in Makefile
	$(quiet) GEN $@
	@mkdir -p $(dir $@)
	$(Q)$(PC_SED) $< > $@

$(B)/tools/%: %.c $(STATIC) $(TOOL_LOBJ)
	$(quiet) CC $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -Itools $(LDFLAGS) -o $@ $< $(TOOL_LOBJ) $(STATIC) $(LIBS) -lm

# corio-kv's units: -Itools, so they name the shared code "common/opt.h".
$(B)/obj/tools/kv/%.o: tools/kv/%.c $(B)/.cflags
	$(quiet) CC $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -Itools -c -o $@ $<

$(B)/tools/corio-kv: $(KV_OBJS) $(TOOL_LOBJ) $(STATIC)
	$(quiet) LD $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(KV_OBJS) $(TOOL_LOBJ) $(STATIC) $(LIBS) -lm

# corio-load's units, as corio-kv's.
$(B)/obj/tools/load/corio-load/%.o: tools/load/corio-load/%.c $(B)/.cflags
	$(quiet) CC $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -Itools -c -o $@ $<

$(B)/tools/corio-load: $(LOAD_OBJS) $(TOOL_LOBJ) $(STATIC)
	$(quiet) LD $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(LOAD_OBJS) $(TOOL_LOBJ) $(STATIC) $(LIBS) -lm

# upper-echo takes only the tools' option parser from tools/common/.
$(B)/tools/examples/upper-echo: $(UE_OBJS) $(B)/obj/tools/common/opt.o $(STATIC)
	$(quiet) LD $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(UE_OBJS) $(B)/obj/tools/common/opt.o $(STATIC) $(LIBS) -lm

# httpd too (its test runs the built program).
HTTPD_COMMON := $(B)/obj/tools/common/opt.o
$(B)/tools/examples/httpd: $(HTTPD_OBJS) $(HTTPD_COMMON) $(STATIC)
	$(quiet) LD $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(HTTPD_OBJS) $(HTTPD_COMMON) $(STATIC) $(LIBS) -lm

# https-get: the option parser too (its tests run the built program).
$(B)/tools/examples/https-get: $(GET_OBJS) $(B)/obj/tools/common/opt.o $(STATIC)
	$(quiet) LD $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(GET_OBJS) $(B)/obj/tools/common/opt.o $(STATIC) $(LIBS) -lm

# tcp-proxy: one file and the option parser (its test runs the built program).
$(B)/tools/examples/tcp-proxy: $(PROXY_OBJS) $(B)/obj/tools/common/opt.o $(STATIC)
	$(quiet) LD $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(PROXY_OBJS) $(B)/obj/tools/common/opt.o $(STATIC) $(LIBS) -lm

# Tests that link tool units (through their headers) besides the library.
TEST_EXTRA_test_kv_server := $(filter-out %/main.o,$(KV_OBJS))
TEST_EXTRA_test_kv_commands := $(TEST_EXTRA_test_kv_server)
TEST_EXTRA_test_kv_save := $(TEST_EXTRA_test_kv_server)
TEST_EXTRA_test_kv_evict := $(TEST_EXTRA_test_kv_server)
TEST_EXTRA_test_upper_echo := $(filter-out %/main.o,$(UE_OBJS))
TEST_EXTRA_test_tools := $(TOOL_LOBJ)
$(B)/test/test_kv_server: $(TEST_EXTRA_test_kv_server)
$(B)/test/test_kv_commands: $(TEST_EXTRA_test_kv_commands)
$(B)/test/test_kv_save: $(TEST_EXTRA_test_kv_save)
$(B)/test/test_kv_evict: $(TEST_EXTRA_test_kv_evict)
$(B)/test/test_upper_echo: $(TEST_EXTRA_test_upper_echo)
$(B)/test/test_tools: $(TEST_EXTRA_test_tools)

# Tests read JSON with the tools' reader (tools/common/json.h).
TEST_TOOL_OBJS := $(B)/obj/tools/common/json.o
$(B)/test/%: test/%.c test/helpers.h test/net_helpers.h test/kv_helpers.h test/crit_shim.h $(STATIC) $(TEST_TOOL_OBJS)
	$(quiet) CC $@
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(TEST_CFLAGS) -Itools $(LDFLAGS) -o $@ $< $(TEST_EXTRA_$*) $(filter-out $(TEST_EXTRA_$*),$(TEST_TOOL_OBJS)) $(STATIC) \
		$(TEST_LIBS) $(LIBS) -lm

# Man pages: each docs/ page turned into roff by md2man.sh (sh + awk), so
# they are the docs pages, not another copy; a tool's page also gets its
# --help output as OPTIONS. NAME.SECTION: docs page.
MAN_PAGES := corio.3:API corio-runtime.3:RUNTIME corio-backend.3:BACKEND \
	corio-timer.3:TIMERS corio-msg.3:MSG corio-net.3:NET corio-select.3:SELECT \
	corio-work.3:WORK corio-fs.3:FS corio-stats.3:STATS corio-stream.3:STREAM \
	corio-tls.3:TLS corio-sched.3:SCHED \
	corio-stat.1:corio-stat corio-kv.1:corio-kv \
	corio-httpd.1:HTTPD corio-https-get.1:corio-https-get
MAN_TOOLS := corio-stat corio-kv
MAN_OUT   := $(foreach m,$(MAN_PAGES),$(B)/man/man$(subst .,,$(suffix $(word 1,$(subst :, ,$(m)))))/$(word 1,$(subst :, ,$(m))))
man_src = docs/$(word 2,$(subst :, ,$(filter $(1):%,$(MAN_PAGES)))).md
man: $(MAN_OUT)

.SECONDEXPANSION:
$(B)/man/man3/%.3: $$(call man_src,%.3) tools/scripts/md2man.sh
	$(quiet) MAN $@
	@mkdir -p $(dir $@)
	$(Q)sh tools/scripts/md2man.sh $< $* 3 $(VERSION) > $@.tmp && mv $@.tmp $@

$(B)/man/man1/%.1: $$(call man_src,%.1) tools/scripts/md2man.sh $(B)/tools/%
	$(quiet) MAN $@
	@mkdir -p $(dir $@)
	$(Q)$(B)/tools/$* --help > $@.help 2>&1 || true
	$(Q)sh tools/scripts/md2man.sh $< $* 1 $(VERSION) $@.help > $@.tmp && mv $@.tmp $@ && rm -f $@.help

# The examples' pages: their binaries are tools/examples/NAME, installed as corio-NAME.
$(EXAMPLES_INST:%=$(B)/man/man1/corio-%.1): $(B)/man/man1/corio-%.1: \
		$$(call man_src,corio-$$*.1) tools/scripts/md2man.sh $(B)/tools/examples/%
	$(quiet) MAN $@
	@mkdir -p $(dir $@)
	$(Q)$(B)/tools/examples/$* --help > $@.help 2>&1 || true
	$(Q)sh tools/scripts/md2man.sh $< corio-$* 1 $(VERSION) $@.help > $@.tmp && mv $@.tmp $@ && rm -f $@.help

# Every public header compiles on its own, as C and as C++.
check-headers: $(B)/.headers-ok
$(B)/.headers-ok: $(wildcard include/*.h include/corio/*.h)
	$(quiet) HDRS include/
	@mkdir -p $(B)
	$(Q)for h in $^; do \
		printf '#include "%s"\n#include "%s"\n' $$h $$h | \
			$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude -x c -fsyntax-only - || exit 1; \
		if command -v c++ >/dev/null; then printf '#include "%s"\n' $$h | \
			c++ -Wall -Werror -Iinclude -x c++ -fsyntax-only - || exit 1; fi; \
	done
	@touch $@

test: deps
	$(Q)$(MAKE) --no-print-directory lib tests tools
ifeq ($(FAULTS),)
	$(Q)TESTS="$(TESTS)" sh tools/scripts/run-tests.sh $(B) "$(CC)" "$(CFLAGS) $(LDFLAGS)" "$(LIBS)"
else
	$(Q)rm -f $(B)/faults.log; rc=0; \
	CORIO_FAULTS="$${CORIO_FAULTS:-$(FAULTS_SPEC)}" CORIO_FAULTS_LOG="$(abspath $(B))/faults.log" \
	TESTS="$(TESTS)" sh tools/scripts/run-tests.sh $(B) "$(CC)" "$(CFLAGS) $(LDFLAGS)" "$(LIBS)" || rc=$$?; \
	echo "== faults injected ($${CORIO_FAULTS:-$(FAULTS_SPEC)}; test_faults sets its own)"; \
	awk '{ sub(/^.*\): /, ""); for (i = 1; i <= NF; i++) if (split($$i, kv, "=") == 2 && kv[2] ~ /^[0-9]+$$/) \
		{ if (!(kv[1] in n)) order[++k] = kv[1]; n[kv[1]] += kv[2] } } \
		END { for (i = 1; i <= k; i++) printf "%s=%d ", order[i], n[order[i]]; print "(" NR " processes)" }' \
		$(B)/faults.log 2>/dev/null; exit $$rc
endif

FULL ?=
BENCH_AREAS := echo httpd kv kvsave proxy micro burst core fs msg net sched sendfile timer tls
.PHONY: $(BENCH_AREAS:%=bench-%)
bench: deps
	$(Q)$(MAKE) --no-print-directory lib tools
	$(Q)sh tools/bench/bench.sh $(B) $(if $(FULL),full,headline)

$(BENCH_AREAS:%=bench-%): bench-%: deps
	$(Q)$(MAKE) --no-print-directory lib tools
	$(Q)sh tools/bench/bench.sh $(B) $*

# User-space instructions per message under callgrind (tools/bench/bench-instr.sh):
# corio-echo (1 and 64 connections, both backends), uring-echo, epoll-echo and
# httpd per 4 KiB GET; about 6 minutes. Part of make bench FULL=1.
.PHONY: bench-instr
bench-instr: deps
	$(Q)$(MAKE) --no-print-directory lib tools
	$(Q)sh tools/bench/bench.sh $(B) instr

check-layout: lib $(TOOL_LOBJ) $(KV_OBJS) $(LOAD_OBJS) $(UE_OBJS) $(HTTPD_OBJS) $(PROXY_OBJS)
	$(Q)sh tools/scripts/check-layout.sh $(B)/obj $(TOOL_LOBJ) $(KV_OBJS) $(LOAD_OBJS) $(UE_OBJS) $(HTTPD_OBJS) \
		$(PROXY_OBJS)

SECS ?= 10
soak: deps
	$(Q)$(MAKE) --no-print-directory lib tools
	$(Q)sh tools/scripts/soak.sh $(B) $(SECS)

fuzz: deps
	$(Q)sh tools/scripts/fuzz.sh $(SECS)

install: lib man $(MAN_TOOLS:%=$(B)/tools/%) $(EXAMPLES_INST:%=$(B)/tools/examples/%)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PCDIR)
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/
	ln -sf libcorio.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libcorio.so.$(SOVERSION)
	ln -sf libcorio.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libcorio.so
	install -m 644 include/corio.h $(DESTDIR)$(INCLUDEDIR)/
	if [ -d include/corio ]; then install -d $(DESTDIR)$(INCLUDEDIR)/corio && \
		install -m 644 include/corio/*.h $(DESTDIR)$(INCLUDEDIR)/corio/; fi
	$(PC_SED) corio.pc.in > $(DESTDIR)$(PCDIR)/corio.pc # this PREFIX, not the build's
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3
	install -m 755 $(MAN_TOOLS:%=$(B)/tools/%) $(DESTDIR)$(BINDIR)/
	for e in $(EXAMPLES_INST); do install -m 755 $(B)/tools/examples/$$e $(DESTDIR)$(BINDIR)/corio-$$e || exit 1; done
	install -m 644 $(filter %.1,$(MAN_OUT)) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(filter %.3,$(MAN_OUT)) $(DESTDIR)$(MANDIR)/man3/

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libcorio.* $(DESTDIR)$(PCDIR)/corio.pc $(DESTDIR)$(INCLUDEDIR)/corio.h
	rm -rf $(DESTDIR)$(INCLUDEDIR)/corio
	rm -f $(MAN_TOOLS:%=$(DESTDIR)$(BINDIR)/%) $(EXAMPLES_INST:%=$(DESTDIR)$(BINDIR)/corio-%)
	rm -f $(patsubst $(B)/man/%,$(DESTDIR)$(MANDIR)/%,$(MAN_OUT))

clean:
	rm -rf build bench-results

# A source that moved (tools/ was sorted into folders) stays named in an old
# build's .d files: let make forget such a name instead of stopping.
tools/%.c tools/%.h:
	@:

-include $(LIB_OBJS:.o=.d) $(TOOL_LOBJ:.o=.d) $(KV_OBJS:.o=.d) $(LOAD_OBJS:.o=.d) $(UE_OBJS:.o=.d) $(HTTPD_OBJS:.o=.d) $(TEST_BINS:=.d) \
	$(PROXY_OBJS:.o=.d) \
	$(TOOL_BINS:=.d)
