# tq - one non-recursive Makefile.
#
# Targets:
#   all            the programs (build/bin/, symlinked in bin/), the static
#                  and shared libraries (build/lib/, copied to lib/) and
#                  build/libtq.pc
#   check          unit tests, CLI tests (bats), fuzz corpora replay
#   check-asan     the same under AddressSanitizer and UBSan (build-asan/)
#   check-clang    the build by clang, warnings as errors, and the unit tests
#   check-slurm    the sharded pipeline through a one-node Slurm cluster
#   check-valgrind the unit tests under valgrind
#   fuzz fuzz-run  libFuzzer targets (build-fuzz/), see below
#   man-lint       mandoc -Tlint on the man pages
#   install        PREFIX, DESTDIR, BINDIR, LIBDIR, INCDIR, MANDIR,
#                  PKGCONFIGDIR, BASHCOMPDIR
#   uninstall      removes what install installed
#   clean
# V=1 shows the commands.

PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
MANDIR  ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
BASHCOMPDIR  ?= $(PREFIX)/share/bash-completion/completions
DESTDIR ?=

# The library's version, from the header; the soname carries the major.
VERSION := $(shell sed -n 's/^\#define TQ_VERSION_STRING "\(.*\)"/\1/p' lib/tq.h)
SOMAJOR  = $(firstword $(subst ., ,$(VERSION)))
SONAME   = libtq.so.$(SOMAJOR)
SOREAL   = libtq.so.$(VERSION)

CC      ?= cc
# HDF5 is compiled against but not linked: lib/vecio_hdf5.c loads it when
# a file needs it (the soname of the library built against comes first).
PKGS     = openblas lapacke libzstd libxxhash
PKG_CFLAGS := $(shell pkg-config --cflags hdf5 $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
HDF5_LIBS  := $(shell pkg-config --libs hdf5 2>/dev/null)
HDF5_SO    := $(or $(patsubst -L%,%/libhdf5.so,$(firstword $(filter -L%,$(HDF5_LIBS)))),$(shell $(CC) -print-file-name=libhdf5.so))
HDF5_SONAME := $(shell readelf -d $(HDF5_SO) 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')

OPT     ?= -O2 -g
WARN     = -Wall -Wextra -Wshadow -Wcast-align -Wpointer-arith -Wstrict-prototypes \
           -Wmissing-prototypes -Wvla -Wformat=2 -Wno-unused-parameter
CFLAGS  ?= $(OPT)
ALL_CFLAGS = -std=c11 -ffp-contract=off -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -pthread $(WARN) \
             -Ilib $(PKG_CFLAGS) $(CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   = $(PKG_LIBS) -ldl -lm -pthread

BUILD   ?= build
ifeq ($(V),1)
Q =
else
Q = @
endif

LIB_SRC  = $(wildcard lib/*.c)
KERN_SRC = lib/kern/scan_scalar.c lib/kern/dot_scalar.c lib/kern/dispatch.c
KERN_ISA = $(wildcard lib/kern/scan_avx2.c lib/kern/scan_avx512.c \
           lib/kern/scan_amx.c lib/kern/dot_avx2.c lib/kern/dot_avx512.c \
           lib/kern/near_bf16.c lib/kern/near_fma.c lib/kern/near_amx.c)
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o) $(KERN_SRC:%.c=$(BUILD)/%.o) $(KERN_ISA:%.c=$(BUILD)/%.o)
PROGS    = tq-fit tq-encode tq-build tq-search tq-merge tq-recall tq-inspect tq-cat
PROG_BIN = $(PROGS:%=$(BUILD)/bin/%)
CMD_COMMON = $(BUILD)/cmd/common.o
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNIT_BIN = $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
LIBA     = $(BUILD)/lib/libtq.a
LIBSO    = $(BUILD)/lib/$(SOREAL)
PC       = $(BUILD)/libtq.pc

all: $(LIBA) $(LIBSO) $(PROG_BIN) lib/libtq.a lib/$(SOREAL) $(PC)
	@mkdir -p bin && for p in $(PROGS); do ln -sf ../$(BUILD)/bin/$$p bin/$$p; done

# The libraries are also copied to lib/ (libtq.a, libtq.so.0.1.0 with its
# links libtq.so.0 and libtq.so), the product's documented path.
lib/libtq.a: $(LIBA)
	$(Q)cp $(LIBA) $@

lib/$(SOREAL): $(LIBSO)
	$(Q)cp $(LIBSO) $@
	$(Q)ln -sf $(SOREAL) lib/$(SONAME) && ln -sf $(SONAME) lib/libtq.so

$(BUILD)/%.o: %.c lib/tq.h lib/internal.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(LIB_SRC:%.c=$(BUILD)/%.o): lib/reader_impl.h
$(BUILD)/lib/vecio_hdf5.o: ALL_CFLAGS += $(if $(HDF5_SONAME),-DTQ_HDF5_SONAME='"$(HDF5_SONAME)"')
$(BUILD)/lib/vecio.o $(BUILD)/lib/vecwrite_fmt.o: lib/vecwrite_fmt.h

# One set of library objects serves both libraries: position-independent
# so that they can go into libtq.so, hidden unless lib/tq.h declares them,
# and without semantic interposition so that calls between the library's
# own functions are direct and may be inlined, as in a non-PIC build.
LIB_CFLAGS = -fPIC -fvisibility=hidden -fno-semantic-interposition
$(LIB_OBJ): ALL_CFLAGS += $(LIB_CFLAGS)

# Each instruction-set kernel is compiled with its own flags; the rest of
# the build stays baseline x86-64.
$(BUILD)/lib/kern/scan_avx2.o $(BUILD)/lib/kern/dot_avx2.o: ALL_CFLAGS += -mavx2 -mfma -mbmi2 -mf16c
$(BUILD)/lib/kern/near_fma.o: ALL_CFLAGS += -mavx2 -mfma
$(BUILD)/lib/kern/scan_avx512.o $(BUILD)/lib/kern/dot_avx512.o: ALL_CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512vbmi -mavx512vnni -mbmi2
$(BUILD)/lib/kern/scan_amx.o: ALL_CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512vbmi -mavx512vnni -mbmi2 -mamx-tile -mamx-int8
$(BUILD)/lib/kern/near_bf16.o: ALL_CFLAGS += -mavx512f -mavx512bw -mavx512bf16
$(BUILD)/lib/kern/near_amx.o: ALL_CFLAGS += -mavx512f -mamx-tile -mamx-bf16
$(BUILD)/lib/kern/scan_amx.o $(BUILD)/lib/kern/near_amx.o: lib/kern/amx.h
$(BUILD)/lib/kern/dispatch.o: ALL_CFLAGS += $(if $(wildcard lib/kern/scan_avx2.c),-DTQ_HAVE_AVX2) $(if $(wildcard lib/kern/scan_avx512.c),-DTQ_HAVE_AVX512) $(if $(wildcard lib/kern/scan_amx.c),-DTQ_HAVE_AMX) $(if $(wildcard lib/kern/near_bf16.c),-DTQ_HAVE_BF16) $(if $(wildcard lib/kern/near_fma.c),-DTQ_HAVE_FMA) $(if $(wildcard lib/kern/near_amx.c),-DTQ_HAVE_AMXBF16)

$(LIBA): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# The shared library exports the functions of lib/tq.h and nothing else:
# the version script makes every other symbol local, and -z defs refuses
# to link a library with an unresolved reference.
$(LIBSO): $(LIB_OBJ) lib/libtq.map
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) -shared -Wl,-soname,$(SONAME) \
	    -Wl,--version-script=lib/libtq.map -Wl,-z,defs \
	    -o $@ $(LIB_OBJ) $(LDLIBS)
	$(Q)ln -sf $(SOREAL) $(BUILD)/lib/$(SONAME) && ln -sf $(SONAME) $(BUILD)/lib/libtq.so

# libtq.pc for pkg-config; install writes it again for its own PREFIX.
# LIBDIR and INCDIR are written relative to ${prefix} when they are in it.
PC_SED = -e 's|@PREFIX@|$(PREFIX)|' \
	 -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|' \
	 -e 's|@INCDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCDIR))|' \
	 -e 's|@VERSION@|$(VERSION)|' -e 's|@PKGS@|$(PKGS)|'
$(PC): lib/libtq.pc.in lib/tq.h Makefile
	@mkdir -p $(dir $@)
	$(Q)sed $(PC_SED) lib/libtq.pc.in >$@

$(BUILD)/bin/%: $(BUILD)/cmd/%.o $(CMD_COMMON) $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/cmd/%.o: cmd/%.c lib/tq.h cmd/common.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -Icmd -c -o $@ $<

# tq-recall --plot: the SVG writer and the --peers reader, objects of cmd/
# that only tq-recall links.
PLOT_OBJ = $(BUILD)/cmd/plot.o $(BUILD)/cmd/peers.o
$(BUILD)/bin/tq-recall: $(PLOT_OBJ)
$(BUILD)/cmd/plot.o $(BUILD)/cmd/tq-recall.o: cmd/plot.h
$(BUILD)/cmd/peers.o $(BUILD)/cmd/tq-recall.o: cmd/peers.h

# tq-search --labels and --like: the labels printed and looked up.
$(BUILD)/bin/tq-search: $(BUILD)/cmd/labels.o
$(BUILD)/cmd/labels.o $(BUILD)/cmd/tq-search.o: cmd/labels.h

$(BUILD)/tests/%: tests/unit/%.c tests/unit/unit.h $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(LIBA) $(LDLIBS) $(UNIT_LIBS)

# Tests that write HDF5 files link the library themselves.
$(BUILD)/tests/test_vecio $(BUILD)/tests/test_shard: UNIT_LIBS = $(HDF5_LIBS)

units: $(UNIT_BIN)

# make check: C unit tests, malformed-file tests and the CLI tests (bats).
check: all test-build

# Runs the suite against the programs of $(BUILD) without touching bin/.
test-build: $(PROG_BIN) units
	@./tests/run-unit $(UNIT_BIN)
	@TQ_BIN=$(CURDIR)/$(BUILD)/bin bats tests/cli
	@$(MAKE) --no-print-directory fuzz-replay

# The same suite under AddressSanitizer and UndefinedBehaviorSanitizer.
check-asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" test-build

# The library, the programs and the unit tests built by clang (build-clang/)
# with every warning an error, and the unit tests run: GCC-only constructs
# break the build of anyone who uses clang, and the fuzz build.
check-clang:
	$(MAKE) BUILD=build-clang CC=clang EXTRA_CFLAGS=-Werror $(PROG_BIN:$(BUILD)/%=build-clang/%) \
	    $(UNIT_BIN:$(BUILD)/%=build-clang/%)
	@./tests/run-unit $(UNIT_BIN:$(BUILD)/%=build-clang/%)

# The sharded build, search and merge of scripts/slurm through a real
# one-node Slurm cluster started on this machine (root; installs Slurm).
check-slurm: $(PROG_BIN)
	@./tests/slurm/check $(BUILD)/bin

check-valgrind: all units
	@TQ_VALGRIND=1 ./tests/run-unit $(UNIT_BIN)

# --- fuzzing ---
# Fuzz targets for every parser (tests/fuzz/fuzz_NAME.c, one
# LLVMFuzzerTestOneInput each) and their committed corpora
# (tests/fuzz/corpus/NAME/).  make check replays every corpus through the
# plain driver tests/fuzz/replay.c with the ordinary compiler (fuzz-replay);
# "make fuzz" builds the libFuzzer binaries with clang and the sanitizers
# in build-fuzz/, and "make fuzz-run FUZZ_TARGET=NAME FUZZ_TIME=SECONDS"
# runs one, growing a scratch corpus in build-fuzz/corpus/NAME/ seeded
# from the committed one (new crashes land in build-fuzz/crash/NAME/).
FUZZ_NAMES  = fixture vecs npy idx zstd ids quantizer index codes peers mutate text w2v
FUZZ_REPLAY = $(FUZZ_NAMES:%=$(BUILD)/fuzz/replay_%)
FUZZ_CC    ?= clang
FUZZ_OPT   ?= -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link \
              -fno-sanitize-recover=undefined
FUZZ_TIME  ?= 60
FUZZ_TARGET ?= index

$(BUILD)/fuzz/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c tests/fuzz/fuzz.h $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Itests/fuzz -o $@ $< tests/fuzz/replay.c $(LIBA) $(LDLIBS)

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer -Itests/fuzz -o $@ $< $(LIBA) $(LDLIBS)

# The peers target parses with cmd/peers.c, which the library does not hold.
$(BUILD)/fuzz/replay_peers: tests/fuzz/fuzz_peers.c tests/fuzz/replay.c tests/fuzz/fuzz.h \
    $(BUILD)/cmd/peers.o $(CMD_COMMON) $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Itests/fuzz -Icmd -o $@ $< tests/fuzz/replay.c \
	    $(BUILD)/cmd/peers.o $(CMD_COMMON) $(LIBA) $(LDLIBS)

$(BUILD)/fuzz/fuzz_peers: tests/fuzz/fuzz_peers.c tests/fuzz/fuzz.h $(BUILD)/cmd/peers.o \
    $(CMD_COMMON) $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer -Itests/fuzz -Icmd -o $@ $< \
	    $(BUILD)/cmd/peers.o $(CMD_COMMON) $(LIBA) $(LDLIBS)

fuzz-replay: $(FUZZ_REPLAY)
	@for n in $(FUZZ_NAMES); do \
	    [ -d tests/fuzz/corpus/$$n ] || continue; \
	    printf 'fuzz corpus %-10s ' $$n; \
	    $(BUILD)/fuzz/replay_$$n tests/fuzz/corpus/$$n || exit 1; \
	done

fuzz-bins: $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%)

fuzz:
	$(MAKE) BUILD=build-fuzz CC=$(FUZZ_CC) OPT="$(FUZZ_OPT)" fuzz-bins

# A small ASan quarantine about doubles the rate of the reader targets (each
# input allocates and frees a 1 MiB buffer); -print_final_stats=1 gives the
# execution count (stat::number_of_executed_units) for the record.
fuzz-run: fuzz
	@mkdir -p build-fuzz/corpus/$(FUZZ_TARGET) build-fuzz/crash/$(FUZZ_TARGET)
	ASAN_OPTIONS=$${ASAN_OPTIONS:-quarantine_size_mb=16} \
	UBSAN_OPTIONS=$${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
	nice -n 19 build-fuzz/fuzz/fuzz_$(FUZZ_TARGET) -max_total_time=$(FUZZ_TIME) \
	    -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
	    -print_final_stats=1 \
	    -artifact_prefix=build-fuzz/crash/$(FUZZ_TARGET)/ \
	    build-fuzz/corpus/$(FUZZ_TARGET) tests/fuzz/corpus/$(FUZZ_TARGET)

clean: clean-fuzz
clean-fuzz:
	rm -rf build-fuzz

.PHONY: fuzz fuzz-bins fuzz-run fuzz-replay clean-fuzz
# --- end fuzzing ---

man-lint:
	mandoc -Tlint -Wwarning man/*.1 man/*.5 man/*.7

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) \
	    $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(BASHCOMPDIR) \
	    $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7
	install -m 755 $(PROG_BIN) $(DESTDIR)$(BINDIR)
	install -m 644 $(LIBA) $(DESTDIR)$(LIBDIR)
	install -m 644 $(LIBSO) $(DESTDIR)$(LIBDIR)
	ln -sf $(SOREAL) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libtq.so
	install -m 644 lib/tq.h $(DESTDIR)$(INCDIR)
	sed $(PC_SED) lib/libtq.pc.in >$(DESTDIR)$(PKGCONFIGDIR)/libtq.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/libtq.pc
	install -m 644 man/*.1 $(DESTDIR)$(MANDIR)/man1
	install -m 644 man/tq.5 $(DESTDIR)$(MANDIR)/man5
	install -m 644 man/tq-slurm.7 $(DESTDIR)$(MANDIR)/man7
	install -m 644 completions/tq $(DESTDIR)$(BASHCOMPDIR)/tq
	for p in $(PROGS); do ln -sf tq $(DESTDIR)$(BASHCOMPDIR)/$$p; done

uninstall:
	rm -f $(PROGS:%=$(DESTDIR)$(BINDIR)/%) $(DESTDIR)$(LIBDIR)/libtq.a \
	    $(DESTDIR)$(LIBDIR)/$(SOREAL) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	    $(DESTDIR)$(LIBDIR)/libtq.so $(DESTDIR)$(INCDIR)/tq.h \
	    $(DESTDIR)$(PKGCONFIGDIR)/libtq.pc \
	    $(DESTDIR)$(BASHCOMPDIR)/tq $(PROGS:%=$(DESTDIR)$(BASHCOMPDIR)/%) \
	    $(patsubst man/%.1,$(DESTDIR)$(MANDIR)/man1/%.1,$(wildcard man/*.1)) \
	    $(DESTDIR)$(MANDIR)/man5/tq.5 $(DESTDIR)$(MANDIR)/man7/tq-slurm.7

clean:
	rm -rf build build-asan build-clang bin lib/libtq.a lib/libtq.so*

.PHONY: all units test-build check check-asan check-clang check-slurm check-valgrind man-lint install uninstall clean
.SECONDARY:
