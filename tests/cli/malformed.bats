#!/usr/bin/env bats
# Every file in tests/malformed/ must be refused cleanly: exit status
# exactly 1 and a single stderr line "tq-...: " naming the file.
#
#   tests/malformed/vec/     malformed vector files (committed, see its README)
#   tests/malformed/index/   (README only) tests/malformed/make-index-cases
#                            derives damaged index and quantizer files from
#                            an index built at test time
#
# Each test loops over all the files (tests/cli/loop-check) and reports
# every one refused wrongly.

load helpers

MAL="$BATS_TEST_DIRNAME/../malformed"

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 16 300 5 --clusters 3
	mkfix "$F/q.bin" 16 4 6
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o "$F/good.tq"
	# With labels, so that the LABL section is damaged too.
	seq 0 299 | sed 's/^/w/' >"$F/c.labels"
	"$TQ_BIN/tq-build" -q "$F/good.tq" --labels "$F/c.labels" \
	    -o "$F/good.tqi" "$F/c.bin"
	# The f32 factors (FACT) of older builds too, and 8-byte ids (IDS):
	# one id past 2^32 - 1.
	seq 0 299 | sed '$s/.*/4294967296/' >"$F/wide.ids"
	"$TQ_BIN/tq-build" -q "$F/good.tq" --factors f32 --ids "$F/wide.ids" \
	    -o "$F/good32.tqi" "$F/c.bin"
	# With a calibration (a second commit), for the CALB cases.
	"$TQ_BIN/tq-build" -q "$F/good.tq" --calibrate-sample 50 \
	    -o "$F/cal.tqi" "$F/c.bin"
	# IVF with originals and copies: its rows' map to them (OMAP).
	"$TQ_BIN/tq-fit" --lists 4 -i "$F/c.bin" -o "$F/ivf.tq"
	"$TQ_BIN/tq-build" -q "$F/ivf.tq" --originals f16 --dups 2 \
	    --dup-ratio 1000 --no-calibrate -o "$F/ivf.tqi" "$F/c.bin"
	# A Hadamard rotation with both transforms (24 = 16 + 8 overlapping).
	mkfix "$F/c24.bin" 24 100 7
	"$TQ_BIN/tq-fit" -i "$F/c24.bin" --rotation hadamard -o "$F/had.tq"
	"$PY" "$MAL/make-index-cases" "$F/good.tqi" "$F/good.tq" "$F/cases" \
	    "$F/good32.tqi" "$F/cal.tqi" "$F/ivf.tqi" "$F/had.tq" >"$F/ncases"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
	CASES=$F/cases
}

LOOP="$BATS_TEST_DIRNAME/loop-check"

cases() {
	local p
	for p in "$@"; do
		ls "$CASES"/$p-* 2>/dev/null
	done
}

# The malformed vector (or, with "ids", id) files, as "PATH<tab>DETAIL"
# where tests/malformed/vec/README gives the detail the library reports.
vec_files() {
	local want=${1:-vec}
	[ -d "$MAL/vec" ] || return 0
	"$PY" - "$MAL/vec" "$want" <<'EOF'
import os, re, sys
d, want = sys.argv[1], sys.argv[2]
detail = {}
for line in open(os.path.join(d, "README")):
    m = re.match(r"^(\S+)\s+([A-Z]+)\s+(.*?)\s*$", line)
    if m and os.path.isfile(os.path.join(d, m.group(1))):
        detail[m.group(1)] = m.group(3)
for name in sorted(os.listdir(d)):
    path = os.path.join(d, name)
    if name.startswith("README") or not os.path.isfile(path):
        continue
    ids = name.endswith(".ids") or name.endswith(".u64")
    if ids == (want == "ids"):
        print(path + ("\t" + detail[name] if name in detail else ""))
EOF
}

# check MODE PROG ARG... <files: see loop-check.  Nothing may be left in
# the work directory.
check() {
	local mode=$1 prog=$2
	shift 2
	"$LOOP" "$mode" "$TQ_BIN/$prog" "$@"
	assert_only_files .
}

@test "make-index-cases made its cases" {
	assert_ge "$(cat "$F/ncases")" 100
	# A case is a different file from the original.
	for f in "$CASES"/*; do
		cmp -s "$f" "$F/good.tqi" && { echo "$f equals the original" >&2; false; }
	done
	true
}

@test "index cases (c-, qi-, i-): tq-inspect refuses each" {
	cases c qi i | check refuse tq-inspect {}
}

@test "index cases (c-, qi-, i-): tq-search refuses each" {
	cases c qi i | check refuse tq-search -i "$F/q.bin" {}
}

@test "quantizer cases (c-, qi-, q-): tq-build -q refuses each" {
	cases c qi q | check refuse tq-build -q {} -o out.tqi "$F/c.bin"
}

@test "quantizer cases (q-): tq-inspect, tq-search and tq-encode -q refuse each" {
	cases q | check refuse tq-inspect {}
	cases q | check refuse tq-search -i "$F/q.bin" {}
	cases q | check refuse tq-encode -q {} -i "$F/q.bin" -o out.codes
}

@test "Hadamard rotation cases (q-rotm-hadamard-): refused as damage to ROTM" {
	local n
	n=$(cases q-rotm-hadamard | wc -l)
	[ "$n" -ge 10 ] || { echo "$n cases" >&2; false; }
	cases q-rotm-hadamard | sed 's/$/\tsection ROTM: /' |
	    check refuse tq-inspect {}
	cases q-rotm-hadamard | sed 's/$/\tsection ROTM: /' |
	    check refuse tq-build -q {} -o out.tqi "$F/c24.bin"
	cases q-rotm-hadamard | check refuse tq-encode -q {} -i "$F/c24.bin" \
	    -o out.codes
	# The undamaged one is good for all three.
	"$TQ_BIN/tq-inspect" --verify "$F/had.tq"
	"$TQ_BIN/tq-build" -q "$F/had.tq" -o out.tqi "$F/c24.bin"
	rm out.tqi
}

@test "checksum cases (s-): tq-inspect --verify refuses; tq-search exits 0 or 1" {
	cases s | check refuse tq-inspect --verify {}
	cases s | check nocrash tq-search -i "$F/q.bin" -o /dev/null {}
}

@test "map cases (v-): tq-inspect --verify and a compaction refuse each; tq-search exits 0 or 1" {
	[ -n "$(cases v)" ]
	cases v | check refuse tq-inspect --verify {}
	cases v | check refuse tq-build --compact -o out.tqi {}
	cases v | check nocrash tq-search -i "$F/q.bin" --oversample 4 -o /dev/null {}
	cases v | check nocrash tq-search -i "$F/q.bin" --oversample auto -o /dev/null {}
}

@test "malformed vector files: tq-build refuses each with the reader's detail" {
	[ -n "$(vec_files)" ] || skip "no tests/malformed/vec files"
	vec_files | check refuse tq-build -o out.tqi {}
}

@test "malformed vector files: tq-fit -i refuses each with the reader's detail" {
	[ -n "$(vec_files)" ] || skip "no tests/malformed/vec files"
	vec_files | check refuse tq-fit -i {} -o out.tq
}

@test "malformed vector files: tq-cat refuses each with the reader's detail" {
	[ -n "$(vec_files)" ] || skip "no tests/malformed/vec files"
	vec_files | check refuse tq-cat -o out.bin {}
}

@test "malformed vector files: tq-build -q refuses each" {
	[ -n "$(vec_files)" ] || skip "no tests/malformed/vec files"
	vec_files | cut -f1 | check refuse tq-build -q "$F/good.tq" -o out.tqi {}
}

@test "malformed vector files: tq-search -i and tq-encode -i refuse each" {
	[ -n "$(vec_files)" ] || skip "no tests/malformed/vec files"
	vec_files | cut -f1 | check refuse tq-search -i {} -o out.tsv "$F/good.tqi"
	vec_files | cut -f1 | check refuse tq-encode -q "$F/good.tq" -i {} -o out.codes
}

@test "malformed vector files: tq-inspect refuses each" {
	[ -n "$(vec_files)" ] || skip "no tests/malformed/vec files"
	vec_files | cut -f1 | check refuse tq-inspect {}
}

@test "malformed id files: tq-build --ids refuses each with the reader's detail" {
	[ -n "$(vec_files ids)" ] || skip "no tests/malformed/vec id files"
	vec_files ids | check refuse tq-build --ids {} -o out.tqi "$F/c.bin"
}
