# camlheap -- out-of-process eBPF memory profiler for native OCaml.
#   make          build build/camlheap (installs missing Debian packages first)
#   make test     build, then run every test (unit + end-to-end on real processes; root)
#   make demo     profile Debian's ocamlopt.opt compiling a large stdlib file
#   make bench    overhead ratios, side by side in one run
#   make fuzz     the memtrace writer and reader against each other (FUZZ_SECONDS, default 600)
#   make toolchains  build OCaml 4.12.0, 4.12.1, 4.14.0, 4.14.2, 5.1.0, 5.3.0 (+frame pointers) into ~/.cache/camlheap/toolchains
#   make deps     only install the Debian packages
#   make install  binary, systemd unit, man pages, example config (PREFIX=/usr/local, DESTDIR)

BUILD    ?= build
CC       ?= gcc
CLANG    ?= clang
BPFTOOL  ?= bpftool
OCAMLOPT ?= ocamlopt

# Debian 12 packages the build, the tests, the demo and the bench need.
DEB_PKGS := clang libbpf-dev bpftool libelf-dev libdw-dev zlib1g-dev libglib2.0-dev pkg-config make gcc \
            ocaml-nox python3 python3-pyelftools procps util-linux strace \
            protobuf-c-compiler libprotobuf-c-dev protobuf-compiler libjson-glib-dev \
            libclang-rt-14-dev libdevel-nytprof-perl chromium libxml2-utils gdb \
            libmicrohttpd-dev libsystemd-dev libcurl4-openssl-dev curl systemd python3-prometheus-client prometheus help2man \
            libncurses-dev tmux golang-go menhir ocaml-source libgraphviz-dev

CFLAGS   ?= -O2 -g
CFLAGS   += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation -Iinclude -Iuser -I$(BUILD) \
            -I$(BUILD)/gen
# Recursive (=): pkg-config runs in recipes, after `deps` installed it.
CFLAGS   += $(shell pkg-config --cflags glib-2.0 json-glib-1.0 libmicrohttpd libsystemd libcurl 2>/dev/null)
# libmicrohttpd, libcurl and libgvc (libgraphviz-dev): headers only; loaded by
# the commands that use them (user/cmd/ondemand.h), not at every start
LDLIBS   = -lbpf -ldw -lelf -lz -lm -lpthread -lprotobuf-c \
           $(shell pkg-config --libs glib-2.0 json-glib-1.0 libsystemd ncursesw 2>/dev/null)

BPF_CFLAGS := -O2 -g -target bpf -mcpu=v3 -D__TARGET_ARCH_x86 -I. -Iinclude -Wall -Wno-unused-function

# user/: one folder a stage (README *How it works*): target, collect, profile,
# output, cmd.  Headers are included by their folder: "target/elf_image.h".
USER_SRCS := $(filter-out user/cmd/main.c,$(wildcard user/*/*.c))
USER_OBJS := $(patsubst user/%.c,$(BUILD)/user/%.o,$(USER_SRCS)) $(BUILD)/gen/profile.pb-c.o
BPF_SRCS  := $(wildcard bpf/*.bpf.c)
BPF_OBJS  := $(patsubst bpf/%.bpf.c,$(BUILD)/bpf/%.bpf.o,$(BPF_SRCS))
SKELS     := $(patsubst bpf/%.bpf.c,$(BUILD)/%.skel.h,$(BPF_SRCS))

FIXTURE_SRCS := $(wildcard tests/fixtures/*.ml)
FIXTURES     := $(patsubst tests/fixtures/%.ml,$(BUILD)/fixtures/%,$(FIXTURE_SRCS))
UNIT_SRCS    := $(wildcard tests/unit_*.c)
UNIT_BINS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))

.PHONY: install man
.PHONY: all deps test test-vm demo bench clean fixtures fixtures5 unit fuzz toolchains
.DELETE_ON_ERROR:
# BPF objects and skeletons are intermediate files of a chain: keep them.
.SECONDARY: $(BPF_OBJS) $(SKELS)

all: deps $(BUILD)/camlheap

# Install what is missing (a fresh Debian 12 machine has no package lists).
deps: $(BUILD)/.deps
$(BUILD)/.deps: Makefile
	@mkdir -p $(BUILD)
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "error: packages missing ($$missing); run 'make deps' as root" >&2; exit 1; fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $$missing >/dev/null || exit 1; \
	fi
	@touch $@

$(BUILD)/bpf/%.bpf.o: bpf/%.bpf.c bpf/*.h bpf/*/*.h include/*.h vmlinux.h | $(BUILD)/.deps
	@mkdir -p $(@D)
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/%.skel.h: $(BUILD)/bpf/%.bpf.o
	$(BPFTOOL) gen skeleton $< > $@

# pprof's message layout, generated from the project's own proto/profile.proto
$(BUILD)/gen/profile.pb-c.c $(BUILD)/gen/profile.pb-c.h: proto/profile.proto | $(BUILD)/.deps
	@mkdir -p $(BUILD)/gen
	protoc-c --c_out=$(BUILD)/gen --proto_path=proto proto/profile.proto

$(BUILD)/gen/profile.pb-c.o: $(BUILD)/gen/profile.pb-c.c $(BUILD)/gen/profile.pb-c.h
	$(CC) $(CFLAGS) -Wno-unused-parameter -c $< -o $@

$(BUILD)/user/%.o: user/%.c user/*/*.h include/*.h $(SKELS) $(BUILD)/gen/profile.pb-c.h | $(BUILD)/.deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/camlheap: $(BUILD)/user/cmd/main.o $(USER_OBJS)
	$(CC) $(CFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

# --- tests -------------------------------------------------------------------
# Fixtures: tests/fixtures/NAME.ml [+ NAME_stubs.c] -> build/fixtures/NAME,
# native, with -g.  Per-fixture link flags in tests/fixtures/NAME.flags;
# -I +unix for OCaml 5, where unix has its own directory (ignored by 4.x).
# The shared module tests/fixtures/lib/fixture.ml(i) (arguments, --wait) is
# compiled in each obj dir into fixture.cmxa, a library: it is linked only
# into the fixtures that use it (hello_byte, without unix.cmxa, does not).
FIXTURE_LIB := tests/fixtures/lib/fixture.mli tests/fixtures/lib/fixture.ml
$(BUILD)/fixtures/%: tests/fixtures/%.ml $(FIXTURE_LIB) $(wildcard tests/fixtures/*_stubs.c) $(wildcard tests/fixtures/*.flags) | $(BUILD)/.deps
	@mkdir -p $(BUILD)/fixtures/obj-$*
	cp $< $(FIXTURE_LIB) $(BUILD)/fixtures/obj-$*/
	if [ -f tests/fixtures/$*_stubs.c ]; then cp tests/fixtures/$*_stubs.c $(BUILD)/fixtures/obj-$*/; fi
	cd $(BUILD)/fixtures/obj-$* && $(OCAMLOPT) -g -I +unix -a fixture.mli fixture.ml -o fixture.cmxa && \
	  $(OCAMLOPT) -g -I +unix $$(cat $(CURDIR)/tests/fixtures/$*.flags 2>/dev/null) \
	  fixture.cmxa $$(ls $*_stubs.c 2>/dev/null) $*.ml -o ../$*

# OCaml 5 only fixtures (effects, domains): tests/fixtures/ocaml5/NAME.ml,
# built by `make fixtures5` with an OCaml 5 OCAMLOPT (tests/test_versions.py).
FIXTURES5 := $(patsubst tests/fixtures/ocaml5/%.ml,$(BUILD)/fixtures/%,$(wildcard tests/fixtures/ocaml5/*.ml))
$(BUILD)/fixtures/%: tests/fixtures/ocaml5/%.ml $(FIXTURE_LIB) | $(BUILD)/.deps
	@mkdir -p $(BUILD)/fixtures/obj-$*
	cp $< $(FIXTURE_LIB) $(BUILD)/fixtures/obj-$*/
	cd $(BUILD)/fixtures/obj-$* && $(OCAMLOPT) -g -I +unix -a fixture.mli fixture.ml -o fixture.cmxa && \
	  $(OCAMLOPT) -g -I +unix unix.cmxa fixture.cmxa $*.ml -o ../$*

fixtures5: $(FIXTURES5)

# Bytecode builds of one fixture, for the "not native code" errors.
$(BUILD)/fixtures/hello_byte.byte $(BUILD)/fixtures/hello_byte.custom: tests/fixtures/hello_byte.ml | $(BUILD)/.deps
	@mkdir -p $(BUILD)/fixtures/obj-byte
	cp $< $(BUILD)/fixtures/obj-byte/
	cd $(BUILD)/fixtures/obj-byte && ocamlc unix.cma hello_byte.ml -o ../hello_byte.byte && \
	  ocamlc -custom unix.cma hello_byte.ml -o ../hello_byte.custom

# A Dynlink plugin for the dynhost fixture, compiled against its interface.
$(BUILD)/fixtures/dynplug.cmxs: tests/fixtures/plugin/dynplug.ml $(BUILD)/fixtures/dynhost
	cp $< $(BUILD)/fixtures/obj-dynhost/
	cd $(BUILD)/fixtures/obj-dynhost && $(OCAMLOPT) -g -I +unix -shared dynplug.ml -o ../dynplug.cmxs

$(BUILD)/fixtures/victim: tests/fixtures/victim.c
	@mkdir -p $(@D)
	$(CC) -O1 -o $@ $<

fixtures: $(FIXTURES) $(BUILD)/fixtures/hello_byte.byte $(BUILD)/fixtures/dynplug.cmxs $(BUILD)/fixtures/victim

$(BUILD)/tests/unit_%: tests/unit_%.c tests/unit_check.h $(USER_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $(filter-out %.h,$^) $(LDLIBS)

unit: $(UNIT_BINS) $(BUILD)/tests/fuzz_memtrace

# The memtrace writer and reader against each other (libFuzzer, ASan,
# UBSan); `make test` runs it on a bounded corpus, `make fuzz` for longer.
$(BUILD)/tests/fuzz_memtrace: tests/fuzz_memtrace.c user/output/memtrace.c user/output/memtrace_write.c \
  user/output/memtrace_read.c user/output/memtrace.h user/output/memtrace_internal.h | $(BUILD)/.deps
	@mkdir -p $(@D)
	$(CLANG) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iuser \
	  $(shell pkg-config --cflags glib-2.0) -o $@ tests/fuzz_memtrace.c user/output/memtrace.c \
	  user/output/memtrace_write.c user/output/memtrace_read.c \
	  $(shell pkg-config --libs glib-2.0)

# OCaml toolchains beyond Debian's (tests/toolchains.py): built once into
# ~/.cache/camlheap/toolchains, reused by every clone; `make test` builds the
# ones its version tests need.
toolchains:
	python3 tests/toolchains.py

fuzz: $(BUILD)/tests/fuzz_memtrace
	@mkdir -p $(BUILD)/fuzz-corpus
	$(BUILD)/tests/fuzz_memtrace -max_total_time=$${FUZZ_SECONDS:-600} -max_len=65536 $(BUILD)/fuzz-corpus

PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc

# camlheap(1) from the commands' own --help (help2man), camlheap.conf(5) by hand
man: $(BUILD)/camlheap.1
$(BUILD)/camlheap.1: $(BUILD)/camlheap dist/camlheap.1.h2m
	help2man --no-info --no-discard-stderr --include=dist/camlheap.1.h2m \
	  --name="out-of-process memory profiler for native OCaml programs" $(abspath $(BUILD)/camlheap) > $@

$(BUILD)/camlheap.service: dist/camlheap.service.in
	sed 's|@BINDIR@|$(BINDIR)|g' $< > $@

# The example configuration is installed only where none exists.
install: all $(BUILD)/camlheap.1 $(BUILD)/camlheap.service
	install -D -m 0755 $(BUILD)/camlheap $(DESTDIR)$(BINDIR)/camlheap
	install -D -m 0644 $(BUILD)/camlheap.service $(DESTDIR)$(UNITDIR)/camlheap.service
	install -D -m 0644 $(BUILD)/camlheap.1 $(DESTDIR)$(MANDIR)/man1/camlheap.1
	install -D -m 0644 dist/camlheap.conf.5 $(DESTDIR)$(MANDIR)/man5/camlheap.conf.5
	test -e $(DESTDIR)$(SYSCONFDIR)/camlheap/camlheap.conf || \
	  install -D -m 0644 dist/camlheap.conf $(DESTDIR)$(SYSCONFDIR)/camlheap/camlheap.conf
	@echo "installed; then: edit $(SYSCONFDIR)/camlheap/camlheap.conf, systemctl daemon-reload, systemctl enable --now camlheap"

test: all fixtures unit
	python3 tests/run_tests.py

demo: all
	sh tests/demo.sh

bench: all fixtures
	python3 tests/bench.py

# The kernel executor (bpf_probe_write_user) under Debian's stock kernel in
# qemu: this machine and CI run in lockdown, which refuses the helper.
test-vm: all fixtures
	python3 tests/vm/run_vm.py

clean:
	rm -rf $(BUILD)
