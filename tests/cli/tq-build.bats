#!/usr/bin/env bats
# tq-build: determinism, input formats, ids, originals, refusal of bad input.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 32 700 21 --clusters 10
}

setup() {
	cd_tmp
	C=$BATS_FILE_TMPDIR/c.bin
}

@test "tq-build: output is byte-identical for --threads 1 and --threads 2" {
	run --separate-stderr "$TQ_BIN/tq-build" --threads 1 -o a.tqi "$C"
	assert_status 0
	assert_equal "$output" ""
	assert_equal "$stderr" ""
	"$TQ_BIN/tq-build" --threads 2 -o b.tqi "$C"
	cmp a.tqi b.tqi
	"$TQ_BIN/tq-build" -o c.tqi "$C"	# default: all cores
	cmp a.tqi c.tqi
	assert_only_files . a.tqi b.tqi c.tqi
}

@test "tq-build without -q equals tq-fit -i then tq-build -q" {
	"$TQ_BIN/tq-build" -o a.tqi "$C"
	"$TQ_BIN/tq-fit" -i "$C" -o q.tq
	"$TQ_BIN/tq-build" -q q.tq -o b.tqi "$C"
	cmp a.tqi b.tqi
	"$TQ_BIN/tq-build" -b 2 -m ip -s 9 -o c.tqi "$C"
	"$TQ_BIN/tq-fit" -i "$C" -b 2 -m ip -s 9 -o q2.tq
	"$TQ_BIN/tq-build" -q q2.tq -o d.tqi "$C"
	cmp c.tqi d.tqi
	"$TQ_BIN/tq-build" --no-centre -o e.tqi "$C"
	"$TQ_BIN/tq-fit" -d 32 -o q3.tq
	"$TQ_BIN/tq-build" -q q3.tq -o f.tqi "$C"
	cmp e.tqi f.tqi
}

@test "tq-build: the corpus from stdin, with -q, equals the file" {
	"$TQ_BIN/tq-fit" -i "$C" -o q.tq
	"$TQ_BIN/tq-build" -q q.tq -o a.tqi "$C"
	"$TQ_BIN/tq-build" -q q.tq -o b.tqi - <"$C"
	cmp a.tqi b.tqi
}

@test "tq-build: the corpus from stdin without -q is centred on 0" {
	"$TQ_BIN/tq-build" -o a.tqi - <"$C"
	"$TQ_BIN/tq-fit" -d 32 -o q.tq
	"$TQ_BIN/tq-build" -q q.tq -o b.tqi "$C"
	cmp a.tqi b.tqi
}

@test "tq-build: a pipe of any format gives the file's index: originals, ids" {
	# 9001 rows of dim 32: three chunks of 4096, the last part of a block.
	mkfix c.bin 32 9001 4
	"$TQ_BIN/tq-fit" -i c.bin -o q.tq
	tq tofvecs c.bin c.fvecs
	tq tonpy c.bin c.npy
	"$TQ_BIN/tq-cat" -f text -o c.txt c.bin
	seq 5 9005 | sort -R --random-source=c.bin >ids.txt
	for o in f32 f16 none; do
		for idopt in "" "--ids ids.txt"; do
			# The calibration (a default with originals) once per
			# precision: it is most of a build's time here.
			[ -z "$idopt" ] || idopt="$idopt --no-calibrate"
			# shellcheck disable=SC2086
			"$TQ_BIN/tq-build" -q q.tq --originals $o $idopt -o ref.tqi \
			    c.bin
			for f in c.bin c.fvecs c.npy c.txt; do
				# shellcheck disable=SC2086
				run --separate-stderr sh -c 'cat "$1" | "$2" -q q.tq \
				    --originals "$3" $4 -o p.tqi -' sh "$f" \
				    "$TQ_BIN/tq-build" "$o" "$idopt"
				assert_status 0
				assert_equal "$stderr" ""
				cmp ref.tqi p.tqi
			done
		done
	done
	# No spool or temporary file is left behind.
	assert_only_files . c.bin c.fvecs c.npy c.txt ids.txt q.tq ref.tqi p.tqi
}

@test "tq-build: a pipe that ends early or runs on fails and writes nothing" {
	mkfix c.bin 32 9001 4
	"$TQ_BIN/tq-fit" -i c.bin -o q.tq
	tq tofvecs c.bin c.fvecs
	run --separate-stderr sh -c 'head -c 600000 c.bin | "$1" -q q.tq \
	    -o out.tqi -' sh "$TQ_BIN/tq-build"
	assert_fail1 tq-build stdin "truncated: expected 9001 rows, got 4687"
	run --separate-stderr sh -c '(cat c.bin; head -c 128 c.bin) | "$1" \
	    -q q.tq -o out.tqi -' sh "$TQ_BIN/tq-build"
	assert_fail1 tq-build stdin "trailing data after 9001 rows"
	run --separate-stderr sh -c 'head -c 600010 c.fvecs | "$1" -q q.tq \
	    -o out.tqi -' sh "$TQ_BIN/tq-build"
	assert_fail1 tq-build stdin "truncated at row 4545 (fvecs)"
	assert_only_files . c.bin c.fvecs q.tq
}

@test "tq-build: progress on a terminal only: reading, then writing lists" {
	command -v script >/dev/null || skip "no script(1)"
	script -qec true /dev/null </dev/null >/dev/null 2>&1 ||
	    skip "script(1) cannot make a pseudo-terminal here (no /dev/pts?)"
	mkfix c.bin 32 9001 4 --clusters 8
	"$TQ_BIN/tq-fit" -i c.bin --lists 8 -o q.tq
	tq tofvecs c.bin c.fvecs
	# Not a terminal: nothing on stderr.
	run --separate-stderr sh -c 'cat c.fvecs | "$1" -q q.tq -o a.tqi -' \
	    sh "$TQ_BIN/tq-build"
	assert_status 0
	assert_equal "$stderr" ""
	# A terminal (script(1) makes one): the steps, and the line cleared.
	run script -qec "cat c.fvecs | '$TQ_BIN/tq-build' -q q.tq -o b.tqi -" \
	    /dev/null </dev/null
	assert_status 0
	[[ "$output" == *"tq-build: reading: 4096 rows"* ]] || { show; false; }
	[[ "$output" == *"tq-build: writing lists: "*" of 9001 rows"* ]] ||
	    { show; false; }
	# 9001 rows with originals: calibrated, and it says so.
	[[ "$output" == *"tq-build: calibrating"* &&
	    "$output" != *"calibrating: 0 of 0"* ]] || { show; false; }
	cmp a.tqi b.tqi
	# A flat build from a stream of unknown length, then a fit.
	"$TQ_BIN/tq-fit" -i c.bin -o f.tq
	run script -qec "cat c.fvecs | '$TQ_BIN/tq-build' -q f.tq -o c.tqi -" \
	    /dev/null </dev/null
	assert_status 0
	[[ "$output" == *"tq-build: writing: 9001 of 9001 rows"* ]] ||
	    { show; false; }
	run script -qec "'$TQ_BIN/tq-build' --lists 8 -o d.tqi c.bin" \
	    /dev/null </dev/null
	assert_status 0
	[[ "$output" == *"tq-build: k-means: iteration 1 of at most"* ]] ||
	    { show; false; }
	[[ "$output" == *"tq-build: reading: "*" of 9001 rows"* ]] ||
	    { show; false; }
}

@test "tq-build --originals f16: the same bits with every kernel, edge values too" {
	# Every exponent from below the f16 subnormals to past its largest
	# value, with mantissas just below, at and above the rounding ties.
	"$PY" - <<-'EOF'
	import random, struct
	rnd = random.Random(5)
	vals = []
	for e in range(-28, 18):
	    for low in (0x0fff, 0x1000, 0x1001, 0x0000, 0x1fff):
	        m = (rnd.getrandbits(10) << 13) | low
	        for sign in (0, 1):
	            bits = sign << 31 | (e + 127) << 23 | m
	            vals.append(struct.unpack("<f", struct.pack("<I", bits))[0])
	vals += [0.0, -0.0, 65504.0, 65519.0, 65520.0, 1e18, -1e18, 2.0**-25,
	         2.0**-24, 1.5 * 2.0**-25]
	vals += [0.0] * (-len(vals) % 32)
	with open("e.bin", "wb") as f:
	    f.write(struct.pack("<II", 32, len(vals) // 32))
	    f.write(struct.pack("<%df" % len(vals), *vals))
	EOF
	"$TQ_BIN/tq-fit" -d 32 -o q.tq
	for isa in scalar avx2 avx512; do
		TQ_ISA=$isa "$TQ_BIN/tq-build" -q q.tq --originals f16 -o $isa.tqi \
		    e.bin
	done
	cmp scalar.tqi avx2.tqi
	cmp scalar.tqi avx512.tqi
}

@test "tq-build: fvecs, npy (f4, f8, v2) and zstd corpora give identical indexes" {
	"$TQ_BIN/tq-build" -o ref.tqi "$C"
	tq tofvecs "$C" c.fvecs
	tq tonpy "$C" c.npy
	tq tonpy "$C" c8.npy f8
	tq tonpy "$C" c2.npy f4 v2
	zstd -q -o c.bin.zst "$C"
	zstd -q -o c.fvecs.zst c.fvecs
	for f in c.fvecs c.npy c8.npy c2.npy c.bin.zst c.fvecs.zst; do
		run --separate-stderr "$TQ_BIN/tq-build" -o "$f.tqi" "$f"
		assert_status 0
		cmp ref.tqi "$f.tqi"
	done
}

@test "tq-inspect shows the index: dim, bits, count, originals; verify ok" {
	"$TQ_BIN/tq-build" -b 3 -o a.tqi "$C"
	run --separate-stderr "$TQ_BIN/tq-inspect" a.tqi
	assert_status 0
	[[ "$output" == *"dim 32"* ]] || { show; false; }
	[[ "$output" == *"bits 3"* ]] || { show; false; }
	[[ "$output" == *"700"* ]] || { show; false; }
	for tag in QPAR ROTM CBOK CENT IPAR CODE FACH ID32 ORIG; do
		[[ "$output" == *"$tag"* ]] || { echo "no section $tag" >&2; show; false; }
	done
	run --separate-stderr "$TQ_BIN/tq-inspect" --verify a.tqi
	assert_status 0
	[[ "$output" == *"checksums ok"* ]] || { show; false; }
}

@test "tq-build --originals: f32 by default, f16 half the size, none absent" {
	"$TQ_BIN/tq-build" -o f32.tqi "$C"
	"$TQ_BIN/tq-build" --originals f32 -o f32b.tqi "$C"
	cmp f32.tqi f32b.tqi
	"$TQ_BIN/tq-build" --originals f16 -o f16.tqi "$C"
	"$TQ_BIN/tq-build" --originals none -o none.tqi "$C"
	local s32 s16 s0
	s32=$(stat -c %s f32.tqi)
	s16=$(stat -c %s f16.tqi)
	s0=$(stat -c %s none.tqi)
	# 700 rows * 32 dims * 4 or 2 bytes, give or take section padding.
	assert_ge $((s32 - s16)) $((700 * 32 * 2))
	assert_le $((s32 - s16)) $((700 * 32 * 2 + 128))
	assert_ge $((s16 - s0)) $((700 * 32 * 2))
	assert_le $((s16 - s0)) $((700 * 32 * 2 + 128))
	run "$TQ_BIN/tq-inspect" --json none.tqi
	assert_status 0
	assert_equal "$(printf '%s' "$output" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["originals"])')" none
	tq sections none.tqi | grep -q '^ORIG' && false
	true
}

@test "tq-build --ids: text ids show up in search results" {
	seq 1000 1699 >ids.txt
	"$TQ_BIN/tq-build" --ids ids.txt -o a.tqi "$C"
	tq rows "$C" q.bin 0,5,699
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 --oversample 4 -i q.bin a.tqi
	assert_status 0
	assert_equal "$(cut -f3 <<<"$output" | tr '\n' ' ')" "1000 1005 1699 "
}

@test "tq-build --ids: .u64 raw ids, equal to the same ids as text" {
	"$PY" -c 'import struct,sys; sys.stdout.buffer.write(b"".join(struct.pack("<Q", 2**40 + 3*i) for i in range(700)))' >ids.u64
	"$PY" -c 'print("\n".join(str(2**40 + 3*i) for i in range(700)))' >ids.txt
	"$TQ_BIN/tq-build" --ids ids.u64 -o a.tqi "$C"
	"$TQ_BIN/tq-build" --ids ids.txt -o b.tqi "$C"
	cmp a.tqi b.tqi
	tq rows "$C" q.bin 2
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 --oversample 4 -i q.bin a.tqi
	assert_status 0
	assert_equal "$(cut -f3 <<<"$output")" "$((2**40 + 6))"
}

@test "tq-build --ids with too few or too many ids: exit 1 naming the ids file" {
	seq 1 699 >short.txt
	run --separate-stderr "$TQ_BIN/tq-build" --ids short.txt -o a.tqi "$C"
	assert_fail1 tq-build short.txt
	seq 1 701 >long.txt
	run --separate-stderr "$TQ_BIN/tq-build" --ids long.txt -o a.tqi "$C"
	assert_fail1 tq-build long.txt
	printf '1\n2\nthree\n' >bad.txt
	run --separate-stderr "$TQ_BIN/tq-build" --ids bad.txt -o a.tqi "$C"
	assert_fail1 tq-build bad.txt
	assert_only_files . short.txt long.txt bad.txt
}

@test "tq-build: NaN in the corpus: exit 1 naming the file and row, no output" {
	mkfix nan.bin 16 300 3 --nan 217
	run --separate-stderr "$TQ_BIN/tq-build" -o out.tqi nan.bin
	assert_fail1 tq-build nan.bin 217
	assert_only_files . nan.bin
	# Also with a quantizer given (a single pass).
	"$TQ_BIN/tq-fit" -d 16 -o q.tq
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq -o out.tqi nan.bin
	assert_fail1 tq-build nan.bin 217
	assert_only_files . nan.bin q.tq
}

@test "tq-build: a failed build leaves an existing index byte-identical" {
	mkfix good.bin 16 300 3
	mkfix nan.bin 16 300 3 --nan 299
	"$TQ_BIN/tq-build" -o out.tqi good.bin
	cp out.tqi saved.tqi
	run --separate-stderr "$TQ_BIN/tq-build" -o out.tqi nan.bin
	assert_fail1 tq-build nan.bin
	cmp out.tqi saved.tqi
	assert_only_files . good.bin nan.bin out.tqi saved.tqi
}

@test "tq-build: infinity in the corpus is refused too" {
	"$PY" -c '
import struct, sys
rows = [[0.5] * 8 for _ in range(40)]
rows[33][5] = float("inf")
sys.stdout.buffer.write(struct.pack("<II", 8, 40) + b"".join(struct.pack("<8f", *r) for r in rows))' >inf.bin
	run --separate-stderr "$TQ_BIN/tq-build" -o out.tqi inf.bin
	assert_fail1 tq-build inf.bin 33
	assert_only_files . inf.bin
}

@test "tq-build: an empty file: exit 1 naming it" {
	: >empty.bin
	run --separate-stderr "$TQ_BIN/tq-build" -o out.tqi empty.bin
	assert_fail1 tq-build empty.bin
	assert_only_files . empty.bin
}

@test "tq-build: a fixture with n = 0: exit 1 naming it" {
	mkbytes zero.bin '\x20\x00\x00\x00\x00\x00\x00\x00'
	run --separate-stderr "$TQ_BIN/tq-build" -o out.tqi zero.bin
	assert_fail1 tq-build zero.bin
	assert_only_files . zero.bin
}

@test "tq-build: a header claiming more rows than present: exit 1 naming it" {
	mkfix c.bin 16 100 3
	# Claim 200 rows; hold 100.
	"$PY" -c 'import sys; d = bytearray(open(sys.argv[1], "rb").read()); d[4:8] = (200).to_bytes(4, "little"); open(sys.argv[1], "wb").write(d)' c.bin
	run --separate-stderr "$TQ_BIN/tq-build" -o out.tqi c.bin
	assert_fail1 tq-build c.bin
	# A file cut in the middle of a row.
	mkfix d.bin 16 100 3
	truncate -s $((8 + 4 * 16 * 50 + 12)) d.bin
	run --separate-stderr "$TQ_BIN/tq-build" -o out.tqi d.bin
	assert_fail1 tq-build d.bin
	# A header of dim 0.
	mkbytes z.bin '\x00\x00\x00\x00\x01\x00\x00\x00'
	run --separate-stderr "$TQ_BIN/tq-build" -o out.tqi z.bin
	assert_fail1 tq-build z.bin
	assert_only_files . c.bin d.bin z.bin
}

@test "tq-build -q: a quantizer of another dimension: exit 1" {
	"$TQ_BIN/tq-fit" -d 16 -o q16.tq
	run --separate-stderr "$TQ_BIN/tq-build" -q q16.tq -o out.tqi "$C"
	assert_fail1 tq-build
	[[ "$stderr" == *c.bin* || "$stderr" == *q16.tq* ]] || { show; false; }
	assert_only_files . q16.tq
}

@test "tq-build -q: an index file's quantizer may be used" {
	"$TQ_BIN/tq-fit" -i "$C" -b 2 -o q.tq
	"$TQ_BIN/tq-build" -q q.tq -o a.tqi "$C"
	"$TQ_BIN/tq-build" -q a.tqi -o b.tqi "$C"
	cmp a.tqi b.tqi
}

@test "tq-build -q: a vector file is not a quantizer: exit 1 naming it" {
	run --separate-stderr "$TQ_BIN/tq-build" -q "$C" -o out.tqi "$C"
	assert_fail1 tq-build c.bin
	assert_only_files .
}
