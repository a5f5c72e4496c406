#!/usr/bin/env bats
# Hardening (issue #5): crash safety of the atomic writes under SIGKILL,
# concurrent readers of one index, and hostile headers refused before any
# large allocation.
#
# Crash safety.  tq-build, tq-fit and tq-encode --decode -o FILE write a
# hidden temporary file ".NAME.tmp.XXXXXX" beside the destination
# (mkstemp: unique per run), fsync it and rename it into place.  The tests
# kill them with SIGKILL at random points and check that the destination
# is always either the old file, byte for byte, or the complete new one.
# SIGKILL cannot be caught, so nothing can remove the temporary file of a
# killed run: such strays are expected, and the tests check that they are
# exactly that (hidden, named after the destination, never the destination
# itself); a run that completes leaves none.

load helpers

# Kills per program (three programs); 20 under the sanitizers, whose
# builds now also calibrate, several times slower, on every kill.
if sanitized; then KILLS=${TQ_KILLS:-20}; else KILLS=${TQ_KILLS:-40}; fi

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 64 20000 7 --clusters 8
	mkfix "$F/small.bin" 64 300 8
	mkfix "$F/q.bin" 64 50 9
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o "$F/q.tq"
	"$TQ_BIN/tq-fit" -b 2 -d 64 -o "$F/old.tq"
	# The references: what a run that completes writes.
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o "$F/ref.tqi" "$F/c.bin"
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o "$F/old.tqi" "$F/small.bin"
	"$TQ_BIN/tq-encode" -q "$F/q.tq" -i "$F/c.bin" -o "$F/c.codes"
	"$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i "$F/c.codes" -o "$F/ref.dec"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
}

# A random pause of 0 to $1 milliseconds.
pause_ms() {
	sleep "$(printf '0.%03d' $((RANDOM % ($1 + 1))))"
}

# killer DEST OLD REF CMD...: KILLS times, puts OLD at DEST, starts CMD
# (which writes DEST), SIGKILLs it at a random moment and checks that
# DEST is OLD or REF, byte for byte, and that every other file left is a
# temporary of DEST.  Prints "kills N old N new N strays N".
killer() {
	local dest=$1 old=$2 ref=$3 maxms i pid nold=0 nnew=0 nstray=0 f t0
	shift 3
	# Kill points span the whole run and a little after: 0 to 1.5 times
	# the time a complete run takes here (at least 20 ms).
	t0=$(date +%s%N)
	"$@" 2>/dev/null
	maxms=$((($(date +%s%N) - t0) / 1000000 * 3 / 2))
	((maxms >= 20)) || maxms=20
	((maxms <= 999)) || maxms=999
	rm -f "$dest"
	for ((i = 0; i < KILLS; i++)); do
		cp "$old" "$dest"
		"$@" 2>/dev/null &
		pid=$!
		pause_ms "$maxms"
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		if cmp -s "$dest" "$old"; then
			nold=$((nold + 1))
		elif cmp -s "$dest" "$ref"; then
			nnew=$((nnew + 1))
		else
			echo "kill $i: $dest is neither the old nor the new file" >&2
			ls -la >&2
			return 1
		fi
		for f in .[!.]* *; do
			[ -e "$f" ] || continue
			case $f in
			"$dest") ;;
			".$dest.tmp."??????) rm -f "$f"; nstray=$((nstray + 1)) ;;
			*)	echo "kill $i: unexpected file $f" >&2; return 1 ;;
			esac
		done
	done
	echo "kills $KILLS (0-$maxms ms) old $nold new $nnew strays $nstray"
}

@test "tq-build killed with SIGKILL: the index is the old one or the complete new one" {
	"$TQ_BIN/tq-inspect" --verify "$F/ref.tqi" >/dev/null
	run killer out.tqi "$F/old.tqi" "$F/ref.tqi" \
	    "$TQ_BIN/tq-build" -q "$F/q.tq" -o out.tqi "$F/c.bin"
	[ "$status" -eq 0 ] || { show; false; }
	echo "# tq-build: $output" >&3
	# The survivor is a valid index, whichever it is.
	"$TQ_BIN/tq-inspect" --verify out.tqi >/dev/null
	# A run that completes leaves nothing but its output.
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o out.tqi "$F/c.bin"
	cmp out.tqi "$F/ref.tqi"
	assert_only_files . out.tqi
}

@test "tq-fit killed with SIGKILL: the quantizer is the old one or the complete new one" {
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o ref.tq
	mv ref.tq "$BATS_TEST_TMPDIR/ref.tq"
	cmp "$BATS_TEST_TMPDIR/ref.tq" "$F/q.tq"
	run killer out.tq "$F/old.tq" "$F/q.tq" \
	    "$TQ_BIN/tq-fit" -i "$F/c.bin" -o out.tq
	[ "$status" -eq 0 ] || { show; false; }
	echo "# tq-fit: $output" >&3
	"$TQ_BIN/tq-inspect" --verify out.tq >/dev/null
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o out.tq
	assert_only_files . out.tq
}

@test "tq-encode --decode -o killed with SIGKILL: the output is the old one or the complete new one" {
	run killer out.bin "$F/small.bin" "$F/ref.dec" \
	    "$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i "$F/c.codes" -o out.bin
	[ "$status" -eq 0 ] || { show; false; }
	echo "# tq-encode --decode: $output" >&3
	"$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i "$F/c.codes" -o out.bin
	cmp out.bin "$F/ref.dec"
	assert_only_files . out.bin
}

@test "16 concurrent tq-search processes on one index print what a serial run prints" {
	local i pids=()
	"$TQ_BIN/tq-search" -k 10 -i "$F/q.bin" -o serial.tsv "$F/ref.tqi"
	"$TQ_BIN/tq-search" -k 10 --oversample 4 -i "$F/q.bin" -o serial-rr.tsv "$F/ref.tqi"
	[ "$(wc -l <serial.tsv)" -eq 500 ]
	for ((i = 0; i < 16; i++)); do
		if ((i % 2)); then
			"$TQ_BIN/tq-search" -k 10 --oversample 4 -i "$F/q.bin" \
			    -o "par$i.tsv" "$F/ref.tqi" &
		else
			"$TQ_BIN/tq-search" -k 10 -i "$F/q.bin" \
			    -o "par$i.tsv" "$F/ref.tqi" &
		fi
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i"
	done
	for ((i = 0; i < 16; i++)); do
		if ((i % 2)); then
			cmp "par$i.tsv" serial-rr.tsv
		else
			cmp "par$i.tsv" serial.tsv
		fi
	done
}

# hostile PROG ARG... <files: under a 1 GiB address-space limit, each run
# must exit 1 with one stderr line that does not speak of memory: a header
# that made the program try a giant allocation fails visibly ("out of
# memory"), or dies.
hostile() {
	local f st out bad=0 a args
	export OPENBLAS_NUM_THREADS=1
	while IFS= read -r f; do
		f=${f%%$'\t'*}
		args=()
		for a in "$@"; do
			args+=("${a//\{\}/$f}")
		done
		st=0
		out=$( (ulimit -v 1048576; exec "${args[@]}") 2>&1 >/dev/null \
		    </dev/null) || st=$?
		if [ $st -ne 1 ] || [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ]; then
			echo "${f##*/}: exit $st: $out" >&2
			bad=1
		elif printf '%s' "$out" | grep -qi -e memory -e alloc; then
			echo "${f##*/}: tried to allocate: $out" >&2
			bad=1
		fi
	done
	return $bad
}

@test "hostile headers are refused before allocating (ulimit -v 1 GiB)" {
	sanitized && skip "the sanitizers reserve terabytes of address space"
	local M="$BATS_TEST_DIRNAME/../malformed"
	# One commit, so that a damaged slot 0 leaves no other to read.
	"$TQ_BIN/tq-build" -q "$F/q.tq" --no-calibrate -o "$F/one.tqi" "$F/c.bin"
	"$PY" "$M/make-index-cases" "$F/one.tqi" "$F/q.tq" cases >/dev/null
	# The cases are refused without the limit too (malformed.bats); here
	# nothing may need gigabytes on the way to the refusal.
	ls cases/c-* cases/qi-* cases/i-* cases/q-* | hostile "$TQ_BIN/tq-inspect" {}
	# The container and quantizer checks are shared by every program; the
	# index sections are used by tq-search, a quantizer file by tq-encode.
	ls cases/i-* | hostile "$TQ_BIN/tq-search" -i "$F/q.bin" -o /dev/null {}
	ls cases/q-* | hostile "$TQ_BIN/tq-encode" -q {} -i "$F/q.bin" -o out.codes
	ls "$M"/vec/* | grep -v README | grep -v -e '\.ids$' -e '\.u64$' |
	    hostile "$TQ_BIN/tq-build" -o out.tqi {}
	# Code streams claiming 2^62 and 2^64-2 records.
	"$PY" - "$F/c.codes" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read()[:48 + 10 * 44])
for name, n in (("huge.codes", 1 << 62), ("huge2.codes", (1 << 64) - 2),
                ("u32.codes", 1 << 32)):
    struct.pack_into("<Q", d, 32, n)
    open(name, "wb").write(d)
PY
	ls huge.codes huge2.codes u32.codes |
	    hostile "$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i {} -o out.bin
	ls huge.codes huge2.codes u32.codes |
	    hostile "$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i {} --format fvecs -o out.fvecs
	rm -rf cases
	assert_only_files . huge.codes huge2.codes u32.codes
}

@test "the 1 GiB limit is real: a valid search runs under it" {
	sanitized && skip "the sanitizers reserve terabytes of address space"
	run bash -c "ulimit -v 1048576; exec '$TQ_BIN/tq-search' -k 3 -i '$F/q.bin' '$F/ref.tqi'"
	assert_status 0
	[ "${#lines[@]}" -eq 150 ]
}
