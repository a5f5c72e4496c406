#!/usr/bin/env bats
# BLAS: the same quantizer whatever the OpenBLAS kernels and threads;
# tq-inspect --cpu reports the BLAS; the programs re-run themselves with
# a wider OpenBLAS core when OpenBLAS picked a narrow one, and stop the
# threads OpenBLAS starts.

load helpers

setup() {
	cd_tmp
	unset OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS TQ_BLAS_REEXEC
}

# The cores to compare: Prescott runs on every x86-64, then the widest
# this CPU takes (tq-inspect advises only names the CPU can run).
cores() {
	local line
	echo Prescott
	line=$("$TQ_BIN/tq-inspect" --cpu | sed -n 's/^blas-core: //p')
	echo "${line%% *}"
}

# The checksum of section $2 of file $1.
sum_of() {
	"$TQ_BIN/tq-inspect" "$1" | awk -v t="$2" '$1 == t { print $7 }'
}

@test "tq-fit --lists: the same bytes across OpenBLAS cores and threads" {
	local c t
	mkfix c.bin 24 3000 3 --clusters 20
	# Both rotations are tq's own fixed-order code (the dense QR's panel
	# products too), so whole files are compared.
	"$TQ_BIN/tq-fit" -i c.bin --lists 100 --rotation structured -o ref.tq
	for c in $(cores); do
		for t in 1 2; do
			OPENBLAS_CORETYPE=$c OPENBLAS_NUM_THREADS=$t \
			    "$TQ_BIN/tq-fit" -i c.bin --lists 100 \
			    --rotation structured --threads 3 -o "s-$c-$t.tq"
			cmp ref.tq "s-$c-$t.tq"
		done
	done
	for t in 1 2 3; do
		"$TQ_BIN/tq-fit" -i c.bin --lists 100 --rotation structured \
		    --threads $t -o "t$t.tq"
		cmp ref.tq "t$t.tq"
	done
	"$TQ_BIN/tq-fit" -i c.bin --lists 100 -o dense.tq
	for c in $(cores); do
		OPENBLAS_CORETYPE=$c "$TQ_BIN/tq-fit" -i c.bin --lists 100 \
		    -o "d-$c.tq"
		cmp dense.tq "d-$c.tq"
	done
}

@test "tq-fit: a dense rotation has the same bytes across OpenBLAS cores" {
	local c
	# d = 1536 with seed 1: OpenBLAS's Haswell dgemm once gave other
	# bytes here than its Prescott and SkylakeX kernels.
	# Under the sanitizers (6 s a fit) one other core: the plain run
	# compares them all.
	local list="Haswell $(cores)"
	! sanitized || list=Prescott
	"$TQ_BIN/tq-fit" -d 1536 -b 4 -s 1 --rotation dense -o ref.tq
	for c in $list; do
		OPENBLAS_CORETYPE=$c TQ_BLAS_REEXEC=0 "$TQ_BIN/tq-fit" \
		    -d 1536 -b 4 -s 1 --rotation dense -o "d-$c.tq"
		cmp ref.tq "d-$c.tq"
	done
}

@test "tq-fit: the default (Hadamard) rotation and lists have the same bytes across cores and threads" {
	local c t
	mkfix c.bin 300 2000 3 --clusters 20
	"$TQ_BIN/tq-fit" -i c.bin --lists auto -o ref.tq
	"$TQ_BIN/tq-inspect" ref.tq | grep -qx "rotation hadamard"
	for c in Haswell $(cores); do
		for t in 1 2; do
			OPENBLAS_CORETYPE=$c OPENBLAS_NUM_THREADS=$t \
			    TQ_BLAS_REEXEC=0 "$TQ_BIN/tq-fit" -i c.bin \
			    --lists auto --threads $t -o "a-$c-$t.tq"
			cmp ref.tq "a-$c-$t.tq"
		done
	done
}

@test "tq-inspect --cpu: BLAS library, core, threads; a narrow core warns" {
	run --separate-stderr "$TQ_BIN/tq-inspect" --cpu
	assert_status 0
	[[ "$output" == *$'\nblas: '* ]] || { show; false; }
	[[ "$output" == *$'\nblas-core: '* ]] || { show; false; }
	[[ "$output" =~ $'\n'blas-threads:\ [0-9]+ ]] || { show; false; }
	assert_equal "$stderr" ""
	OPENBLAS_NUM_THREADS=1 run --separate-stderr "$TQ_BIN/tq-inspect" --cpu
	[[ "$output" == *$'\nblas-threads: 1'* ]] || { show; false; }
	# Prescott is narrower than any CPU with SSE4.2; the user's choice
	# stands (no re-run), with a warning naming the variable to set.
	OPENBLAS_CORETYPE=Prescott run --separate-stderr \
	    "$TQ_BIN/tq-inspect" --cpu
	assert_status 0
	[[ "$output" == *$'\nblas-core: Prescott\n'* ]] || { show; false; }
	if [[ "$output" == *sse4.2* ]]; then
		[[ "$stderr" =~ ^tq-inspect:\ warning:\ BLAS\ core\ Prescott\ is\ narrower\ than\ this\ CPU\ supports\;\ set\ OPENBLAS_CORETYPE=[A-Za-z]+$ ]] ||
		    { show; false; }
	fi
}

# An OpenBLAS that picked Prescott, simulated: a preloaded
# openblas_get_corename answers "Prescott" until OPENBLAS_CORETYPE is set.
mkshim() {
	command -v cc >/dev/null || skip "no C compiler"
	! sanitized || skip "sanitizer build: no preloading"
	cat >shim.c <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
char *openblas_get_corename(void)
{
	const char *e = getenv("OPENBLAS_CORETYPE");
	char *(*real)(void);

	if (e == NULL || *e == '\0')
		return "Prescott";
	real = (char *(*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
	return real();
}
EOF
	cc -shared -fPIC -o shim.so shim.c -ldl
	rm shim.c
}

@test "a narrow OpenBLAS core: the programs re-run once with a wider one" {
	mkshim
	run --separate-stderr env LD_PRELOAD="$PWD/shim.so" \
	    "$TQ_BIN/tq-inspect" --cpu
	assert_status 0
	if [[ "$output" != *sse4.2* ]]; then
		skip "no wider core for this CPU"
	fi
	[[ "$output" == *"set by tq; Prescott chosen by OpenBLAS"* ]] ||
	    { show; false; }
	assert_equal "$stderr" ""
	# The marker of a re-run stops a second one.
	run --separate-stderr env LD_PRELOAD="$PWD/shim.so" TQ_BLAS_REEXEC=x \
	    "$TQ_BIN/tq-inspect" --cpu
	[[ "$output" == *$'\nblas-core: Prescott\n'* ]] || { show; false; }
	# Standard input survives the re-run: the same quantizer from a pipe.
	mkfix c.bin 16 500 4
	"$TQ_BIN/tq-fit" -i c.bin --lists 10 --rotation structured -o a.tq
	LD_PRELOAD="$PWD/shim.so" "$TQ_BIN/tq-fit" -i - --lists 10 \
	    --rotation structured -o b.tq <c.bin
	cmp a.tq b.tq
	cat c.bin | LD_PRELOAD="$PWD/shim.so" "$TQ_BIN/tq-fit" -i - \
	    --lists 10 --rotation structured -o c.tq
	cmp a.tq c.tq
}

# The threads of the program reading standard input in the background:
# one waiting for its input has done all its start-up work.
threads_waiting() {
	local pid n
	sleep 3 | "$@" &
	pid=$!
	sleep 1
	n=$(ls "/proc/$pid/task" | wc -l)
	wait "$pid" || true
	echo "$n"
}

@test "the programs stop the threads OpenBLAS starts as it loads" {
	[ -d /proc/self/task ] || skip "no /proc"
	# tq-fit links OpenBLAS; it waits for its corpus on standard input.
	n=$(threads_waiting "$TQ_BIN/tq-fit" -i - -o q.tq)
	assert_equal "$n" 1
	# The test can fail: OpenBLAS's threads stay when the user asks for
	# them (OpenBLAS starts one fewer than the cores).
	[ "$(nproc)" -ge 2 ] || skip "one core: OpenBLAS starts no thread"
	n=$(OPENBLAS_NUM_THREADS=2 threads_waiting "$TQ_BIN/tq-fit" -i - -o q.tq)
	[ "$n" -ge 2 ] || { echo "threads: $n"; false; }
}
