#!/usr/bin/env bats
# An index larger than the memory a search may use: inside a memory cgroup
# smaller than twice the file, tq-search asks the kernel for each query's
# lists and its candidates' originals ahead (madvise WILLNEED, seen with
# strace), and returns what it returns outside.  Needs root, a writable
# memory cgroup and strace; skipped otherwise, and under the sanitizers
# (their shadow memory does not fit a small cgroup).

load helpers

# The memory cgroup hierarchy: "v2 DIR" or "v1 DIR", or nothing.
cg_root() {
	if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		echo "v2 /sys/fs/cgroup"
	elif [ -w /sys/fs/cgroup/memory/cgroup.procs ]; then
		echo "v1 /sys/fs/cgroup/memory"
	fi
}

setup_file() {
	local F=$BATS_FILE_TMPDIR
	# 48 000 x 128 f32 originals: a 27 MB index.
	mkfix "$F/c.bin" 128 48000 7 --clusters 40
	tq rows "$F/c.bin" "$F/q.bin" 5,999,12345,30000,47999
	"$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 64 -o "$F/q.tqq"
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --originals f32 -o "$F/i.tqi" \
	    "$F/c.bin"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
	[ "$(id -u)" -eq 0 ] || skip "needs root for a memory cgroup"
	command -v strace >/dev/null || skip "needs strace"
	! sanitized || skip "sanitizer build: shadow memory exceeds the cgroup"
	read -r CGKIND CGROOT < <(cg_root) || true
	[ -n "${CGROOT:-}" ] || skip "no writable memory cgroup"
	CG=$CGROOT/tq-memory-bats-$$
	mkdir "$CG" || skip "cannot make a memory cgroup"
}

teardown() {
	[ -n "${CG:-}" ] && [ -d "$CG" ] && rmdir "$CG" 2>/dev/null || true
}

# Runs its arguments as a process of the cgroup, limited to $1 bytes.
in_cgroup() {
	local limit=$1
	shift
	if [ "$CGKIND" = v2 ]; then
		echo "$limit" >"$CG/memory.max"
	else
		echo "$limit" >"$CG/memory.limit_in_bytes"
	fi
	sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$CG" "$@"
}

# The madvise(MADV_WILLNEED) calls of one search, as strace counts them.
willneed() {
	grep -c 'MADV_WILLNEED' "$1" || true
}

@test "tq-search: an index larger than memory is read ahead, same results" {
	local size
	size=$(stat -c %s "$F/i.tqi")
	[ "$size" -gt 20000000 ]
	"$TQ_BIN/tq-search" -k 10 --probes 8 --oversample 4 --threads 1 \
	    -i "$F/q.bin" "$F/i.tqi" >free.tsv
	strace -f -e trace=madvise -o free.trace "$TQ_BIN/tq-search" -k 10 \
	    --probes 8 --oversample 4 --threads 1 -i "$F/q.bin" "$F/i.tqi" \
	    >/dev/null
	# Limited to 1.5 times the file: less than twice it, so it spills.
	in_cgroup $((size * 3 / 2)) strace -f -e trace=madvise \
	    -o small.trace "$TQ_BIN/tq-search" -k 10 --probes 8 \
	    --oversample 4 --threads 1 -i "$F/q.bin" "$F/i.tqi" >small.tsv
	cmp free.tsv small.tsv
	[ "$(willneed free.trace)" -eq 0 ]
	# 5 queries: 40 originals each, and of their 8 lists the codes and
	# factors of those not in memory at both ends (the kernel's own
	# read-ahead at open often brings this small file's codes in).
	[ "$(willneed small.trace)" -ge 200 ]
	# Every range asked for is mapped: compact factors (FACH, the
	# default) are read ahead where they are.
	[ "$(grep 'MADV_WILLNEED' small.trace | grep -c '= -1')" -eq 0 ]
	# Two threads share the queries: the same results.
	in_cgroup $((size * 3 / 2)) "$TQ_BIN/tq-search" -k 10 --probes 8 \
	    --oversample 4 --threads 2 -i "$F/q.bin" "$F/i.tqi" >small2.tsv
	cmp free.tsv small2.tsv
}

@test "tq-search: the bounded re-rank reads ahead too, same results" {
	local size
	size=$(stat -c %s "$F/i.tqi")
	"$TQ_BIN/tq-search" -k 10 --probes 8 --oversample auto --threads 1 \
	    -i "$F/q.bin" "$F/i.tqi" >free.tsv
	in_cgroup $((size * 3 / 2)) strace -f -e trace=madvise \
	    -o small.trace "$TQ_BIN/tq-search" -k 10 --probes 8 \
	    --oversample auto --threads 1 -i "$F/q.bin" "$F/i.tqi" >small.tsv
	cmp free.tsv small.tsv
	[ "$(willneed small.trace)" -ge 80 ]
	[ "$(grep 'MADV_WILLNEED' small.trace | grep -c '= -1')" -eq 0 ]
	# Small k: the walk soon passes the first request (2k originals),
	# and later ones (k more each) ask for the rest; the same results.
	for k in 2 3; do
		"$TQ_BIN/tq-search" -k $k --probes 8 --oversample auto \
		    --threads 1 -i "$F/q.bin" "$F/i.tqi" >free$k.tsv
		in_cgroup $((size * 3 / 2)) strace -f -e trace=madvise \
		    -o small$k.trace "$TQ_BIN/tq-search" -k $k --probes 8 \
		    --oversample auto --threads 1 -i "$F/q.bin" --stats \
		    "$F/i.tqi" >small$k.tsv 2>stats$k.json
		cmp free$k.tsv small$k.tsv
		# More originals read than the first requests asked for.
		reads=$(grep -o '"originals_read":[0-9]*' stats$k.json |
		    cut -d: -f2)
		[ "$reads" -gt $((5 * 2 * k)) ]
		[ "$(grep 'MADV_WILLNEED' small$k.trace | grep -c '= -1')" \
		    -eq 0 ]
	done
}
