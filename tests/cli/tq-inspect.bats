#!/usr/bin/env bats
# tq-inspect: description, --json, --verify, --cpu; damaged files.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 32 300 61 --clusters 4
	mkfix "$F/q.bin" 32 5 62
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o "$F/q.tq"
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o "$F/idx.tqi" "$F/c.bin"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
	cp "$F/idx.tqi" idx.tqi
	cp "$F/q.tq" q.tq
}

# A field of a JSON object on stdin; "count" may also be called "vectors".
json() {
	"$PY" -c '
import json, sys
o = json.load(sys.stdin)
k = sys.argv[1]
if k == "count" and k not in o:
    k = "vectors"
print(json.dumps(o[k]))' "$1"
}

# Offset of a section's payload.
section_offset() { tq sections "$1" | awk -v t="$2" '$1 == t { print $2 }'; }

@test "tq-inspect on a quantizer: kind, dim 32, bits 4, metric, seed" {
	run --separate-stderr "$TQ_BIN/tq-inspect" q.tq
	assert_status 0
	assert_equal "$stderr" ""
	for want in "dim 32" "bits 4" "l2" "42" QPAR ROTM CBOK CENT; do
		[[ "$output" == *"$want"* ]] || { echo "lacks '$want'" >&2; show; false; }
	done
	[[ "$output" == *quantizer* ]] || { show; false; }
	[[ "$output" != *CODE* ]] || { show; false; }
}

@test "tq-inspect on an index: dim 32, bits 4, count 300, every section" {
	run --separate-stderr "$TQ_BIN/tq-inspect" idx.tqi
	assert_status 0
	for want in "dim 32" "bits 4" "300" index QPAR ROTM CBOK CENT IPAR CODE FACH ID32 ORIG; do
		[[ "$output" == *"$want"* ]] || { echo "lacks '$want'" >&2; show; false; }
	done
}

@test "tq-inspect --json parses and agrees with the file" {
	run --separate-stderr "$TQ_BIN/tq-inspect" --json idx.tqi
	assert_status 0
	"$PY" -c 'import json,sys; json.loads(sys.argv[1])' "$output"
	assert_equal "$(json dim <<<"$output")" 32
	assert_equal "$(json bits <<<"$output")" 4
	assert_equal "$(json metric <<<"$output")" '"l2"'
	assert_equal "$(json count <<<"$output")" 300
	assert_equal "$(json seed <<<"$output")" 42
	run --separate-stderr "$TQ_BIN/tq-inspect" --json q.tq
	assert_status 0
	"$PY" -c 'import json,sys; json.loads(sys.argv[1])' "$output"
	assert_equal "$(json dim <<<"$output")" 32
}

@test "tq-inspect --verify: 'checksums ok' on good files" {
	for f in q.tq idx.tqi; do
		run --separate-stderr "$TQ_BIN/tq-inspect" --verify $f
		assert_status 0
		[[ "$output" == *"checksums ok"* ]] || { show; false; }
	done
	run --separate-stderr "$TQ_BIN/tq-inspect" --json --verify idx.tqi
	assert_status 0
	"$PY" -c 'import json,sys; json.loads(sys.argv[1])' "$output"
}

@test "tq-inspect --cpu: names the kernel and list filter; TQ_ISA=scalar and TQ_LIST_FILTER=sgemm override" {
	run --separate-stderr "$TQ_BIN/tq-inspect" --cpu
	assert_status 0
	[[ "$output" =~ scalar|avx2|avx512|amx ]] || { show; false; }
	[[ "$output" =~ list-filter:\ (bf16|sgemm) ]] || { show; false; }
	if [[ "$output" == *avx512bf16* && "$output" =~ kernel:\ (avx512|amx) ]]
	then
		[[ "$output" == *"list-filter: bf16"* ]] || { show; false; }
	fi
	[[ "$output" =~ single-list-filter:\ (bf16|bf16-fma|f32) ]] ||
	    { show; false; }
	if [[ "$output" == *" avx2 "* && "$output" == *" fma "* ]]; then
		TQ_ISA=avx2 run --separate-stderr "$TQ_BIN/tq-inspect" --cpu
		[[ "$output" == *"single-list-filter: bf16-fma"* ]] ||
		    { show; false; }
		TQ_LIST_FILTER=fma run --separate-stderr "$TQ_BIN/tq-inspect" \
		    --cpu
		[[ "$output" == *"list-filter: sgemm"* ]] || { show; false; }
		[[ "$output" == *"single-list-filter: bf16-fma"* ]] ||
		    { show; false; }
	fi
	TQ_ISA=scalar run --separate-stderr "$TQ_BIN/tq-inspect" --cpu
	assert_status 0
	[[ "$output" == *scalar* ]] || { show; false; }
	[[ "$output" == *"list-filter: sgemm"* ]] || { show; false; }
	[[ "$output" == *"single-list-filter: f32"* ]] || { show; false; }
	TQ_LIST_FILTER=sgemm run --separate-stderr "$TQ_BIN/tq-inspect" --cpu
	assert_status 0
	[[ "$output" == *"list-filter: sgemm"* ]] || { show; false; }
	[[ "$output" == *"single-list-filter: f32"* ]] || { show; false; }
}

@test "tq-inspect --cpu: every feature Linux reports (/proc/cpuinfo) is detected" {
	# Linux lists a feature only where the CPU has it and the kernel
	# saves its state, so each one tq knows must be in tq's list too:
	# a detection that clobbers a cpuid register (AMX once went missing
	# on every CPU with AVX512_BF16) fails here on the machines that have it.
	[ -r /proc/cpuinfo ] || skip "no /proc/cpuinfo"
	flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1) "
	run --separate-stderr "$TQ_BIN/tq-inspect" --cpu
	assert_status 0
	have=" $(sed -n 's/^cpu: //p' <<<"$output") "
	n=0
	for pair in sse4_2:sse4.2 avx:avx avx2:avx2 fma:fma f16c:f16c \
	    bmi2:bmi2 avx512f:avx512f avx512dq:avx512dq avx512cd:avx512cd \
	    avx512bw:avx512bw avx512vl:avx512vl avx512vbmi:avx512vbmi \
	    avx512_vnni:avx512vnni avx512_bf16:avx512bf16 \
	    amx_int8:amx-int8 amx_bf16:amx-bf16; do
		[[ "$flags" == *" ${pair%%:*} "* ]] || continue
		n=$((n + 1))
		[[ "$have" == *" ${pair#*:} "* ]] || {
			echo "cpuinfo: ${pair%%:*}; tq-inspect --cpu: no ${pair#*:}"
			show
			false
		}
	done
	[ "$n" -gt 0 ] || skip "no feature tq knows in /proc/cpuinfo"
}

@test "a flipped byte in each payload: --verify exit 1 naming the section" {
	local tag off
	for tag in CODE FACH ID32 ORIG QPAR ROTM CBOK CENT IPAR; do
		cp "$F/idx.tqi" bad.tqi
		off=$(section_offset bad.tqi $tag)
		[ -n "$off" ] || { echo "no section $tag" >&2; false; }
		tq flip bad.tqi $((off + 1)) 0x01
		run --separate-stderr "$TQ_BIN/tq-inspect" --verify bad.tqi
		assert_fail1 tq-inspect bad.tqi "$tag"
	done
}

@test "a flipped byte in CODE: --verify fails, but search still runs" {
	off=$(section_offset idx.tqi CODE)
	tq flip idx.tqi $((off + 7))
	run --separate-stderr "$TQ_BIN/tq-inspect" --verify idx.tqi
	assert_fail1 tq-inspect idx.tqi CODE
	run --separate-stderr "$TQ_BIN/tq-search" -i "$F/q.bin" idx.tqi
	assert_status 0
}

@test "truncated index at 0, 10, 63, 64, half, size-1: exit 1 with one line, never a crash" {
	local size cut prog
	size=$(stat -c %s "$F/idx.tqi")
	for cut in 0 10 63 64 96 $((size / 2)) $((size - 64)) $((size - 1)); do
		cp "$F/idx.tqi" t.tqi
		truncate -s $cut t.tqi
		run --separate-stderr "$TQ_BIN/tq-inspect" t.tqi
		echo "cut $cut: tq-inspect" >&2
		assert_fail1 tq-inspect t.tqi
		run --separate-stderr "$TQ_BIN/tq-inspect" --verify t.tqi
		assert_fail1 tq-inspect t.tqi
		run --separate-stderr "$TQ_BIN/tq-search" -i "$F/q.bin" t.tqi
		echo "cut $cut: tq-search" >&2
		assert_fail1 tq-search t.tqi
		assert_equal "$output" ""
	done
}

@test "truncated quantizer: tq-inspect, tq-build -q, tq-encode -q exit 1" {
	local size cut
	size=$(stat -c %s "$F/q.tq")
	for cut in 0 10 63 64 $((size / 2)) $((size - 1)); do
		cp "$F/q.tq" t.tq
		truncate -s $cut t.tq
		echo "cut $cut" >&2
		run --separate-stderr "$TQ_BIN/tq-inspect" t.tq
		assert_fail1 tq-inspect t.tq
		run --separate-stderr "$TQ_BIN/tq-build" -q t.tq -o out.tqi "$F/c.bin"
		assert_fail1 tq-build t.tq
		run --separate-stderr "$TQ_BIN/tq-encode" -q t.tq -i "$F/c.bin" -o out.codes
		assert_fail1 tq-encode t.tq
	done
	assert_only_files . idx.tqi q.tq t.tq
}

@test "every byte of header and section table flipped: search 0 or 1, verify 1" {
	local ns n
	ns=$("$PY" -c 'import struct,sys; print(struct.unpack_from("<I", open(sys.argv[1], "rb").read(), 16)[0])' idx.tqi)
	n=$((64 + 32 * ns))
	tq flips idx.tqi "$BATS_TEST_TMPDIR/flips" $n
	ls "$BATS_TEST_TMPDIR"/flips/flip-* | "$BATS_TEST_DIRNAME/loop-check" nocrash "$TQ_BIN/tq-search" -k 3 -i "$F/q.bin" -o /dev/null {}
	ls "$BATS_TEST_TMPDIR"/flips/flip-* | "$BATS_TEST_DIRNAME/loop-check" refuse "$TQ_BIN/tq-inspect" --verify {}
}

@test "tq-inspect: not a tq file: exit 1 naming it" {
	run --separate-stderr "$TQ_BIN/tq-inspect" "$F/c.bin"
	assert_fail1 tq-inspect c.bin
	printf 'hello\n' >text.txt
	run --separate-stderr "$TQ_BIN/tq-inspect" text.txt
	assert_fail1 tq-inspect text.txt
	run --separate-stderr "$TQ_BIN/tq-inspect" .
	assert_fail1 tq-inspect .
}

# The corruption matrix of the hardening issue, on a larger index (1000 x 64
# with f16 originals, about 80 KiB, flat or IVF): truncation at every 4 KiB
# boundary and at both edges of every section, and a sample of payload
# bytes flipped.  Arguments: tq-build options.
corruption_matrix() {
	mkfix big.bin 64 1000 71 --clusters 8
	mkfix q64.bin 64 3 72
	# One commit: a cut inside a second one would leave the first, whole.
	"$TQ_BIN/tq-build" --originals f16 --no-calibrate "$@" -o big.tqi big.bin
	"$TQ_BIN/tq-inspect" --json big.tqi > info.json
	mkdir cuts flips
	"$PY" - big.tqi info.json <<'PY'
import json, sys
data = open(sys.argv[1], 'rb').read()
info = json.load(open(sys.argv[2]))
cuts = set(range(0, len(data), 4096))
for s in info["sections"]:
    for e in (s["offset"], s["offset"] + s["length"]):
        cuts.update(x for x in (e - 1, e, e + 1) if 0 <= x < len(data))
for c in sorted(cuts):
    open("cuts/cut-%06d" % c, "wb").write(data[:c])
# 8 payload bytes from every section, each flipped by xor 0xff.
for s in info["sections"]:
    for i in range(8):
        at = s["offset"] + (s["length"] - 1) * i // 7
        b = bytearray(data)
        b[at] ^= 0xff
        open("flips/flip-%s-%06d" % (s["tag"].strip(), at), "wb").write(b)
print(len(cuts), "cuts,", 8 * len(info["sections"]), "flips", file=sys.stderr)
PY
	ls cuts/* | "$BATS_TEST_DIRNAME/loop-check" refuse "$TQ_BIN/tq-inspect" {}
	ls cuts/* | "$BATS_TEST_DIRNAME/loop-check" refuse "$TQ_BIN/tq-inspect" --verify {}
	ls cuts/* | "$BATS_TEST_DIRNAME/loop-check" refuse "$TQ_BIN/tq-search" -k 3 --oversample 2 -i q64.bin {}
	# A flipped payload byte: --verify names the damage; a search may run
	# on the damaged values (checksums are not read on open) but must not
	# crash or read out of bounds.
	ls flips/* | "$BATS_TEST_DIRNAME/loop-check" refuse "$TQ_BIN/tq-inspect" --verify {}
	ls flips/* | "$BATS_TEST_DIRNAME/loop-check" nocrash "$TQ_BIN/tq-search" -k 3 --oversample 2 -i q64.bin {}
}

@test "corruption matrix: every 4 KiB and section-edge truncation, sampled payload flips" {
	corruption_matrix
}

@test "corruption matrix of an IVF index with copies (IVFC, LIST, IPAR copies)" {
	corruption_matrix --lists 6 --dups 2 --dup-ratio 2
	# Every probe reaches every list, damaged offsets included.
	ls flips/flip-LIST-* | "$BATS_TEST_DIRNAME/loop-check" nocrash "$TQ_BIN/tq-search" -k 3 --probes 6 -i q64.bin {}
}
