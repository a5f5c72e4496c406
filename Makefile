# tq - one non-recursive Makefile.  Targets: all check check-asan check-slurm
# install clean.
# V=1 shows the commands.

PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
MANDIR  ?= $(PREFIX)/share/man
DESTDIR ?=

CC      ?= cc
PKGS     = hdf5 openblas lapacke libzstd libxxhash
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT     ?= -O2 -g
WARN     = -Wall -Wextra -Wshadow -Wcast-align -Wpointer-arith -Wstrict-prototypes \
           -Wmissing-prototypes -Wvla -Wformat=2 -Wno-unused-parameter
CFLAGS  ?= $(OPT)
ALL_CFLAGS = -std=c11 -ffp-contract=off -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -pthread $(WARN) \
             -Ilib $(PKG_CFLAGS) $(CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   = $(PKG_LIBS) -lm -pthread

BUILD   ?= build
ifeq ($(V),1)
Q =
else
Q = @
endif

LIB_SRC  = $(wildcard lib/*.c)
KERN_SRC = lib/kern/scan_scalar.c lib/kern/dot_scalar.c lib/kern/dispatch.c
KERN_ISA = $(wildcard lib/kern/scan_avx2.c lib/kern/scan_avx512.c \
           lib/kern/scan_amx.c lib/kern/dot_avx2.c lib/kern/dot_avx512.c)
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o) $(KERN_SRC:%.c=$(BUILD)/%.o) $(KERN_ISA:%.c=$(BUILD)/%.o)
PROGS    = tq-fit tq-encode tq-build tq-search tq-merge tq-recall tq-inspect
PROG_BIN = $(PROGS:%=$(BUILD)/bin/%)
CMD_COMMON = $(BUILD)/cmd/common.o
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNIT_BIN = $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
LIBA     = $(BUILD)/lib/libtq.a

all: $(LIBA) $(PROG_BIN) lib/libtq.a
	@mkdir -p bin && for p in $(PROGS); do ln -sf ../$(BUILD)/bin/$$p bin/$$p; done

# The library is also linked to lib/libtq.a as the product's documented path.
lib/libtq.a: $(LIBA)
	$(Q)cp $(LIBA) $@

$(BUILD)/%.o: %.c lib/tq.h lib/internal.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(LIB_SRC:%.c=$(BUILD)/%.o): lib/reader_impl.h

# Each instruction-set kernel is compiled with its own flags; the rest of
# the build stays baseline x86-64.
$(BUILD)/lib/kern/scan_avx2.o $(BUILD)/lib/kern/dot_avx2.o: ALL_CFLAGS += -mavx2 -mfma -mbmi2 -mf16c
$(BUILD)/lib/kern/scan_avx512.o $(BUILD)/lib/kern/dot_avx512.o: ALL_CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512vbmi -mavx512vnni -mbmi2
$(BUILD)/lib/kern/scan_amx.o: ALL_CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512vbmi -mavx512vnni -mbmi2 -mamx-tile -mamx-int8
$(BUILD)/lib/kern/dispatch.o: ALL_CFLAGS += $(if $(wildcard lib/kern/scan_avx2.c),-DTQ_HAVE_AVX2) $(if $(wildcard lib/kern/scan_avx512.c),-DTQ_HAVE_AVX512) $(if $(wildcard lib/kern/scan_amx.c),-DTQ_HAVE_AMX)

$(LIBA): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/bin/%: $(BUILD)/cmd/%.o $(CMD_COMMON) $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/cmd/%.o: cmd/%.c lib/tq.h cmd/common.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -Icmd -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c tests/unit/unit.h $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(LIBA) $(LDLIBS)

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
FUZZ_NAMES  = fixture vecs npy idx zstd ids quantizer index codes text w2v
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
	    $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7
	install -m 755 $(PROG_BIN) $(DESTDIR)$(BINDIR)
	install -m 644 $(LIBA) $(DESTDIR)$(LIBDIR)
	install -m 644 lib/tq.h $(DESTDIR)$(INCDIR)
	install -m 644 man/*.1 $(DESTDIR)$(MANDIR)/man1
	install -m 644 man/tq.5 $(DESTDIR)$(MANDIR)/man5
	install -m 644 man/tq-slurm.7 $(DESTDIR)$(MANDIR)/man7

clean:
	rm -rf build build-asan bin lib/libtq.a

.PHONY: all units test-build check check-asan check-slurm check-valgrind man-lint install clean
.SECONDARY:
