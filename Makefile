# slot: build, tests, benchmarks, install.  `make help` lists the targets.

PREFIX     ?= /usr/local
DESTDIR    ?=
SBINDIR    ?= $(PREFIX)/sbin
BINDIR     ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
DOCDIR     ?= $(PREFIX)/share/doc/slot
MANDIR     ?= $(PREFIX)/share/man
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include

CC         ?= cc
PKG_CONFIG ?= pkg-config
B          ?= build

# The version the programs print (-V, slotctl status) and the Debian
# packages': debian/changelog's first entry says the same (scripts/deb.sh
# checks), and debian/rules passes the changelog's here.
SLOT_VERSION ?= 0.1.0

CFLAGS     ?= -O2 -g
WARNFLAGS  := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
              -Wmissing-prototypes -Wformat=2 -Wno-format-nonliteral -Wpointer-arith \
              -Wvla -Wundef
ALL_CFLAGS  = -std=gnu11 $(WARNFLAGS) $(CFLAGS) -fno-strict-aliasing
ALL_CPPFLAGS = -Iinclude -D_GNU_SOURCE $(CPPFLAGS)

# libev ships no pkg-config file on Debian: link it directly.
PKGS_CORE  := libsodium inih
CORE_LIBS  := $(shell $(PKG_CONFIG) --libs $(PKGS_CORE) 2>/dev/null)
EV_LIBS    := -lev -lm
TEST_LIBS  := $(shell $(PKG_CONFIG) --libs cmocka 2>/dev/null)
NFQ_LIBS   := $(shell $(PKG_CONFIG) --libs libnetfilter_queue libmnl 2>/dev/null)
# xmlrpc-c ships its own config tool, not pkg-config files.
XMLRPC_CONFIG ?= xmlrpc-c-config
XMLRPC_SERVER_CFLAGS := $(shell $(XMLRPC_CONFIG) abyss-server --cflags 2>/dev/null)
XMLRPC_SERVER_LIBS := $(shell $(XMLRPC_CONFIG) abyss-server --libs 2>/dev/null)
# dirclient.c drives libcurl itself, to cap a directory answer while it
# arrives and check it before xmlrpc-c parses it (libcurl4-openssl-dev).
XMLRPC_CLIENT_LIBS := $(shell $(XMLRPC_CONFIG) client --libs 2>/dev/null) -lpthread

CORE_SRC   := $(sort $(wildcard src/core/*.c))
RELAY_MAIN := src/relay/relayd.c
RELAY_SRC  := $(filter-out $(RELAY_MAIN),$(sort $(wildcard src/relay/*.c)))
CLIENT_MAIN := src/client/slotd.c
CLIENT_SRC := $(filter-out $(CLIENT_MAIN),$(sort $(wildcard src/client/*.c)))
DIRD_MAIN  := src/directory/dird.c
DIRD_SRC   := $(filter-out $(DIRD_MAIN),$(sort $(wildcard src/directory/*.c)))
SIM_MAIN   := src/sim/slot-sim.c
SIM_SRC    := $(filter-out $(SIM_MAIN),$(sort $(wildcard src/sim/*.c)))
WANEM_MAIN := tests/testbed/slot-wanem.c
WANEM_SRC  := $(filter-out $(WANEM_MAIN),$(sort $(wildcard tests/testbed/*.c)))
UNIT_SRC   := $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))
LIBSLOT_SRC := $(sort $(wildcard src/lib/*.c))
TOOL_SRC   := $(sort $(wildcard tests/integration/*.c))

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

CORE_LIB   := $(B)/libslotcore.a
RELAY_LIB  := $(B)/librelay.a
WANEM_LIB  := $(B)/libwanem.a
CLIENT_LIB := $(B)/libclient.a
DIRD_LIB   := $(B)/libdird.a
SIM_LIB    := $(B)/libsim.a
BINS       := $(B)/slot-relayd $(B)/slotd $(B)/slotctl $(B)/slot-dird $(B)/slot-keygen
BINS       += $(B)/slot-sim
# libslot, the public library (include/slot/slot.h): its version is the
# header's, its soname the major number.
LIBSLOT_VERSION := $(shell sed -n 's/^\#define SLOT_LIB_VERSION[^"]*"\(.*\)"/\1/p' include/slot/slot.h)
LIBSLOT_SONAME := libslot.so.$(firstword $(subst ., ,$(LIBSLOT_VERSION)))
LIBSLOT_SO := $(B)/libslot.so.$(LIBSLOT_VERSION)
LIBSLOT_A  := $(B)/libslot.a
LIBSLOT    := $(LIBSLOT_SO) $(B)/$(LIBSLOT_SONAME) $(B)/libslot.so $(LIBSLOT_A)
TESTBED    := $(if $(wildcard $(WANEM_MAIN)),$(B)/slot-wanem)
UNIT_BINS  := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
TOOL_BINS  := $(patsubst tests/integration/%.c,$(B)/tests/%,$(TOOL_SRC))
FUZZ_BINS  := $(patsubst tests/fuzz/%.c,$(B)/%,$(FUZZ_SRC))

.PHONY: all deps check unit asan-unit integration bench install uninstall clean help demo
.PHONY: programs deb
.PHONY: fuzz fuzz-smoke fuzz-build fuzz-bins
.DELETE_ON_ERROR:

all: $(BINS) $(LIBSLOT) $(TOOL_BINS) $(TESTBED)

# What make install installs, without the test tools (debian/rules).
programs: $(BINS) $(LIBSLOT)

help:
	@echo "make               build daemons, libslot and test tools into $(B)/"
	@echo "make demo          install missing packages, build, and show slot on an emulated WAN (root)"
	@echo "make check         install missing packages, run unit, sanitizer, fuzz-smoke and integration tests"
	@echo "make unit          unit tests only;  make asan-unit  the same under ASan+UBSan"
	@echo "make integration   namespace tests (root)"
	@echo "make fuzz          every libFuzzer target (clang) for FUZZ_SECONDS=$(FUZZ_SECONDS) s each,"
	@echo "                   into $(B)/fuzz/; make fuzz-smoke  each over its seeds (make check)"
	@echo "make bench         benchmarks; rewrites docs/benchmarks.md (root)"
	@echo "                   BENCH='e2e_files e2e_geo': only these; BENCH=--assemble: re-assemble only"
	@echo "make install       PREFIX=$(PREFIX) DESTDIR=$(DESTDIR)"
	@echo "make deb           Debian packages (debhelper, lintian) into $(B)/deb/"

deps:
	@./scripts/deps.sh

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

# The files that print SLOT_VERSION get it here, and are rebuilt when it
# changes: their objects depend on a stamp named after it.
VERSION_SRC := $(shell grep -rl --include='*.c' SLOT_VERSION src 2>/dev/null)
$(call obj,$(VERSION_SRC)): ALL_CPPFLAGS += -DSLOT_VERSION='"$(SLOT_VERSION)"'
$(call obj,$(VERSION_SRC)): $(B)/version-$(SLOT_VERSION)
$(B)/version-$(SLOT_VERSION):
	@mkdir -p $(B) && rm -f $(B)/version-* && touch $@

$(CORE_LIB): $(call obj,$(CORE_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(RELAY_LIB): $(call obj,$(RELAY_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(CLIENT_LIB): $(call obj,$(CLIENT_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(DIRD_LIB): $(call obj,$(DIRD_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(SIM_LIB): $(call obj,$(SIM_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

# Only the directory's objects need xmlrpc-c's server flags.
$(B)/obj/src/directory/%.o: ALL_CPPFLAGS += $(XMLRPC_SERVER_CFLAGS)

$(WANEM_LIB): $(call obj,$(WANEM_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(B)/slot-relayd: $(call obj,$(RELAY_MAIN)) $(RELAY_LIB) $(CORE_LIB)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(XMLRPC_CLIENT_LIBS) $(CORE_LIBS) $(EV_LIBS)

$(B)/slotd: $(call obj,$(CLIENT_MAIN)) $(CLIENT_LIB) $(CORE_LIB)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(NFQ_LIBS) $(XMLRPC_CLIENT_LIBS) $(CORE_LIBS) $(EV_LIBS)

$(B)/slot-dird: $(call obj,$(DIRD_MAIN)) $(DIRD_LIB) $(CORE_LIB)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(XMLRPC_SERVER_LIBS) $(CORE_LIBS) $(EV_LIBS)

# The evaluator: the core's selection and clustering code, no daemon parts.
$(B)/slot-sim: $(call obj,$(SIM_MAIN)) $(SIM_LIB) $(CORE_LIB)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(CORE_LIBS) -lm

# libslot: position-independent, and nothing exported but slot.h's functions
# (SLOT_API); the archive holds the same objects. Nothing of the daemons'
# libraries goes in: it links against libc only.
$(B)/obj/src/lib/%.o: ALL_CFLAGS += -fPIC -fvisibility=hidden

$(LIBSLOT_A): $(call obj,$(LIBSLOT_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(LIBSLOT_SO): $(call obj,$(LIBSLOT_SRC))
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -shared -Wl,-soname,$(LIBSLOT_SONAME) -o $@ $^

$(B)/$(LIBSLOT_SONAME) $(B)/libslot.so: $(LIBSLOT_SO)
	ln -sf $(notdir $(LIBSLOT_SO)) $@

$(B)/slotctl: $(call obj,src/ctl/slotctl.c)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^

$(B)/slot-keygen: $(call obj,src/ctl/slot-keygen.c) $(CORE_LIB)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(CORE_LIBS)

# The WAN emulator of the test bed (tests/testbed, docs/testbed.md).
$(B)/slot-wanem: $(call obj,$(WANEM_MAIN)) $(WANEM_LIB) $(CORE_LIB)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(NFQ_LIBS) $(CORE_LIBS) -lm

$(B)/tests/test_%: $(call obj,tests/unit/test_%.c) $(CLIENT_LIB) $(RELAY_LIB) $(WANEM_LIB) $(DIRD_LIB) $(SIM_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(TEST_LIBS) $(NFQ_LIBS) $(XMLRPC_SERVER_LIBS) $(XMLRPC_CLIENT_LIBS) $(CORE_LIBS) $(EV_LIBS)

# The library's own test links its archive too (after the pattern rule's
# prerequisites in $^: it needs libc alone).
$(B)/tests/test_libslot: $(LIBSLOT_A)

$(B)/tests/%: $(call obj,tests/integration/%.c) $(CLIENT_LIB) $(RELAY_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(NFQ_LIBS) $(XMLRPC_CLIENT_LIBS) $(CORE_LIBS) $(EV_LIBS)

# An application of libslot, as one would build it: the shared library only.
$(B)/tests/slot-libget: $(call obj,tests/integration/slot-libget.c) $(LIBSLOT_SO) $(B)/libslot.so
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $< -L$(B) -lslot -Wl,-rpath,$(abspath $(B))

# test_libslot.py: the Python binding over this build's libslot.
unit: $(UNIT_BINS) $(LIBSLOT)
	@SLOT_LIBSLOT=$(abspath $(B))/$(LIBSLOT_SONAME) ./tests/unit/run.sh $(UNIT_BINS) \
	    tests/unit/test_libslot.py

# The same unit tests built with AddressSanitizer and UBSan, in their own tree.
asan-unit:
	@$(MAKE) --no-print-directory B=build/asan \
	    CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	    LDFLAGS="-fsanitize=address,undefined" unit

integration: all
	@./tests/integration/run.sh

# The fuzz targets (tests/fuzz, docs/reliability.md, "Fuzzing"): the project's
# sources built again with clang, libFuzzer's coverage, ASan and UBSan into
# $(B)/fuzz/, then each target run on a scratch copy of its seed corpus.
FUZZ_SECONDS ?= 60
FUZZ_CC    ?= clang
FUZZ_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
              -fno-sanitize-recover=all -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION

fuzz-build:
	@$(MAKE) --no-print-directory B=$(B)/fuzz CC=$(FUZZ_CC) CFLAGS="$(FUZZ_CFLAGS)" \
	    LDFLAGS="-fsanitize=fuzzer,address,undefined" fuzz-bins

fuzz-bins: $(FUZZ_BINS)

fuzz: fuzz-build
	@./tests/fuzz/run.sh $(B)/fuzz $(FUZZ_SECONDS)

# A few seconds per target, for make check: they keep building and pass over
# their seeds and a short mutation run.
fuzz-smoke: fuzz-build
	@./tests/fuzz/run.sh --smoke $(B)/fuzz

$(B)/fuzz_%: $(call obj,tests/fuzz/fuzz_%.c) $(CLIENT_LIB) $(RELAY_LIB) $(DIRD_LIB) $(SIM_LIB) $(CORE_LIB)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(NFQ_LIBS) $(XMLRPC_SERVER_LIBS) $(XMLRPC_CLIENT_LIBS) $(CORE_LIBS) $(EV_LIBS)

# The directory's harness parses requests with xmlrpc-c's server side.
$(B)/obj/tests/fuzz/%.o: ALL_CPPFLAGS += $(XMLRPC_SERVER_CFLAGS)

# make check and make demo build on every core, unless make was given -j
# itself (its MAKEFLAGS are seen in a recipe, not while it parses).
NPROC      := $(shell nproc 2>/dev/null || echo 2)
BUILD_J     = $(if $(findstring -j,$(MAKEFLAGS)),,-j$(NPROC))

check: deps
	@$(MAKE) --no-print-directory $(BUILD_J) all
	@$(MAKE) --no-print-directory $(BUILD_J) unit
	@$(MAKE) --no-print-directory $(BUILD_J) asan-unit
	@$(MAKE) --no-print-directory $(BUILD_J) fuzz-smoke
	@$(MAKE) --no-print-directory deb
	@$(MAKE) --no-print-directory integration

# The README's first command: an emulated WAN of real cities, curl directly and
# through slot, a table and $(B)/demo.png (scripts/demo.py; root; a few minutes).
# DEMO_FLAGS=--quick runs the small version the tests run; NAT=1 puts the client
# behind a home NAT (--nat).
demo: deps
	@$(MAKE) --no-print-directory $(BUILD_J) all
	@SLOT_BUILD=$(abspath $(B)) /usr/bin/python3 scripts/demo.py$(if $(NAT), --nat)$(if $(DEMO_FLAGS), $(DEMO_FLAGS))

bench: deps
	@$(MAKE) --no-print-directory all
	@./scripts/bench/run.sh $(BENCH)

# What `make install` puts where; `make uninstall` removes exactly this, and
# the directories left empty (INST_DIRS, SYSTEM_DIRS below).
# The daemons and slotctl go to SBINDIR, slot-sim (a user's tool) to BINDIR.
# Units and man pages get the real SBINDIR, DOCDIR and UNITDIR (not DESTDIR).
INST_SBIN  := slot-relayd slotd slot-dird slotctl slot-keygen
INST_BIN   := slot-sim
INST_UNITS := slot-relayd slotd slot-dird
INST_CONFS := relayd slotd dird
INST_MAN   := slotd.8 slot-relayd.8 slot-dird.8 slotctl.8 slot.conf.5 slot-sim.1 slot-keygen.1 \
              libslot.3
INST_DOCS  := README.md $(wildcard docs/*.md)
INST_SUBST := sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' \
              -e 's|@UNITDIR@|$(UNITDIR)|g'
# libslot: the shared library with its soname and development links, the
# archive, the one public header, and slot.pc for pkg-config --libs slot.
INST_LIBS  := $(notdir $(LIBSLOT_SO)) $(LIBSLOT_SONAME) libslot.so libslot.a
INST_PC    := sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
              -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(LIBSLOT_VERSION)|g'

# The directories install makes, and those of the live system that
# uninstall leaves even when empty: the FHS's, and those Debian ships empty
# under /usr/local (other software expects them; some packages' scripts
# fail without /usr/share/man/man1).
INST_DIRS  = $(SBINDIR) $(BINDIR) $(UNITDIR) $(DOCDIR) $(SYSCONFDIR)/slot $(LIBDIR)/pkgconfig \
             $(INCLUDEDIR)/slot $(addprefix $(MANDIR)/man,1 3 5 8)
SYSTEM_DIRS := / /bin /sbin /lib /lib64 /etc /opt /srv /var /usr \
              $(addprefix /usr/,bin sbin lib lib64 libexec include share share/man share/doc \
                  lib/systemd lib/systemd/system lib/pkgconfig $(addprefix share/man/man,1 2 3 4 5 6 7 8)) \
              /usr/local $(addprefix /usr/local/,bin etc games include lib sbin share share/man src)

install: $(addprefix $(B)/,$(INST_SBIN) $(INST_BIN)) $(LIBSLOT_SO) $(LIBSLOT_A)
	install -d $(addprefix $(DESTDIR),$(INST_DIRS))
	install -m 755 $(addprefix $(B)/,$(INST_SBIN)) $(DESTDIR)$(SBINDIR)/
	install -m 755 $(addprefix $(B)/,$(INST_BIN)) $(DESTDIR)$(BINDIR)/
	for u in $(INST_UNITS); do \
	    $(INST_SUBST) systemd/$$u.service > $(DESTDIR)$(UNITDIR)/$$u.service && \
	    chmod 644 $(DESTDIR)$(UNITDIR)/$$u.service || exit 1; \
	done
	for m in $(INST_MAN); do \
	    $(INST_SUBST) docs/man/$$m > $(DESTDIR)$(MANDIR)/man$${m##*.}/$$m && \
	    chmod 644 $(DESTDIR)$(MANDIR)/man$${m##*.}/$$m || exit 1; \
	done
	for c in $(INST_CONFS); do \
	    install -m 644 etc/$$c.conf $(DESTDIR)$(SYSCONFDIR)/slot/$$c.conf.example || exit 1; \
	done
	install -m 644 $(INST_DOCS) $(DESTDIR)$(DOCDIR)/
	install -m 644 $(LIBSLOT_SO) $(LIBSLOT_A) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(LIBSLOT_SO)) $(DESTDIR)$(LIBDIR)/$(LIBSLOT_SONAME)
	ln -sf $(notdir $(LIBSLOT_SO)) $(DESTDIR)$(LIBDIR)/libslot.so
	install -m 644 include/slot/slot.h $(DESTDIR)$(INCLUDEDIR)/slot/slot.h
	$(INST_PC) src/lib/slot.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/slot.pc
	chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/slot.pc

# Leaves an operator's own files (/etc/slot/*.conf, the key) and shared
# directories alone. $(SBINDIR)/slot-sim: where earlier versions put it.
# Then each directory of INST_DIRS left empty goes, and each parent left
# empty after it: up to DESTDIR, whose tree install made (a staging tree),
# or, in the live system (no DESTDIR), up to the first of SYSTEM_DIRS.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(SBINDIR)/,$(INST_SBIN)) \
	    $(addprefix $(DESTDIR)$(BINDIR)/,$(INST_BIN)) $(DESTDIR)$(SBINDIR)/slot-sim \
	    $(patsubst %,$(DESTDIR)$(UNITDIR)/%.service,$(INST_UNITS)) \
	    $(patsubst %,$(DESTDIR)$(SYSCONFDIR)/slot/%.conf.example,$(INST_CONFS)) \
	    $(foreach m,$(INST_MAN),$(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(m)) \
	    $(addprefix $(DESTDIR)$(LIBDIR)/,$(INST_LIBS)) $(DESTDIR)$(LIBDIR)/pkgconfig/slot.pc \
	    $(DESTDIR)$(INCLUDEDIR)/slot/slot.h
	rm -rf $(DESTDIR)$(DOCDIR)
	@for d in $(INST_DIRS); do \
	    while [ "$$d" != / ] && [ "$$d" != . ]; do \
	        case " $(if $(filter-out /,$(DESTDIR)),,$(SYSTEM_DIRS)) " in *" $$d "*) break ;; esac; \
	        [ -d "$(DESTDIR)$$d" ] || { d=$$(dirname "$$d"); continue; }; \
	        rmdir "$(DESTDIR)$$d" 2>/dev/null || break; \
	        echo "rmdir $(DESTDIR)$$d"; \
	        d=$$(dirname "$$d"); \
	    done; \
	done

# Debian packages (debian/; docs/deploy.md, "The Debian packages"):
# debhelper builds them in a copy of this tree ($(B)/deb/src, objects in
# $(B)/deb/obj), so that the tree gets no debian/tmp and its parent no .deb;
# the packages and the .changes land in $(B)/deb/, and lintian's errors or
# warnings fail it.
deb:
	@./scripts/deb.sh $(B)/deb

clean:
	rm -rf build

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
