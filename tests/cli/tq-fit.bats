#!/usr/bin/env bats
# tq-fit: quantizer files, determinism, -d versus -i.

load helpers

setup() {
	cd_tmp
}

# A field of tq-inspect --json.
jfield() {
	"$TQ_BIN/tq-inspect" --json "$1" |
	    "$PY" -c 'import json,sys; v = json.load(sys.stdin)[sys.argv[1]]; print(json.dumps(v))' "$2"
}

@test "tq-fit -d: same arguments give byte-identical files" {
	run "$TQ_BIN/tq-fit" -d 32 -o a.tq
	assert_status 0
	assert_equal "$output" ""
	"$TQ_BIN/tq-fit" -d 32 -o b.tq
	cmp a.tq b.tq
	assert_only_files . a.tq b.tq
}

@test "tq-fit: a different seed gives a different file" {
	"$TQ_BIN/tq-fit" -d 32 -o a.tq
	"$TQ_BIN/tq-fit" -d 32 -s 7 -o b.tq
	! cmp -s a.tq b.tq || false
	"$TQ_BIN/tq-fit" -d 32 -s 42 -o c.tq	# 42 is the default
	cmp a.tq c.tq
}

@test "tq-fit -i: deterministic, centred on the data, dim from the corpus" {
	mkfix c.bin 32 300 5
	"$TQ_BIN/tq-fit" -i c.bin -o a.tq
	"$TQ_BIN/tq-fit" -i c.bin -o b.tq
	cmp a.tq b.tq
	"$TQ_BIN/tq-fit" -d 32 -o d.tq
	! cmp -s a.tq d.tq || false
	run "$TQ_BIN/tq-inspect" a.tq
	assert_status 0
	[[ "$output" == *"dim 32"* ]] || { show; false; }
	assert_equal "$(jfield a.tq centred)" true
	assert_equal "$(jfield d.tq centred)" false
}

@test "tq-fit -i with -d that matches is the same as -i alone" {
	mkfix c.bin 32 100 5
	"$TQ_BIN/tq-fit" -i c.bin -o a.tq
	"$TQ_BIN/tq-fit" -i c.bin -d 32 -o b.tq
	cmp a.tq b.tq
}

@test "tq-fit -i with -d that does not match: exit 1 'dimension mismatch'" {
	mkfix c.bin 32 100 5
	run --separate-stderr "$TQ_BIN/tq-fit" -i c.bin -d 16 -o a.tq
	assert_fail1 tq-fit c.bin "dimension mismatch"
	assert_only_files . c.bin
}

@test "tq-fit --no-centre with -i equals -d" {
	mkfix c.bin 32 100 5
	"$TQ_BIN/tq-fit" -i c.bin --no-centre -o a.tq
	"$TQ_BIN/tq-fit" -d 32 -o b.tq
	cmp a.tq b.tq
	assert_equal "$(jfield a.tq centred)" false
}

@test "tq-fit --sample: the mean of the first rows only" {
	mkfix c.bin 16 200 5
	tq head c.bin h.bin 50
	"$TQ_BIN/tq-fit" -i c.bin --sample 50 -o a.tq
	"$TQ_BIN/tq-fit" -i h.bin -o b.tq
	cmp a.tq b.tq
	"$TQ_BIN/tq-fit" -i c.bin --sample 0 -o c.tq	# 0 = all
	"$TQ_BIN/tq-fit" -i c.bin -o d.tq
	cmp c.tq d.tq
	! cmp -s a.tq d.tq || false
}

@test "tq-fit: bits, metric, rotation and scale search are recorded" {
	for b in 1 2 3 4; do
		for m in ip cosine l2; do
			"$TQ_BIN/tq-fit" -d 24 -b $b -m $m -o q$b$m.tq
			run "$TQ_BIN/tq-inspect" q$b$m.tq
			assert_status 0
			[[ "$output" == *"bits $b"* ]] || { show; false; }
			[[ "$output" == *"dim 24"* ]] || { show; false; }
			assert_equal "$(jfield q$b$m.tq metric)" "\"$m\""
		done
	done
	"$TQ_BIN/tq-fit" -d 24 --rotation dense -o d.tq
	"$TQ_BIN/tq-fit" -d 24 --rotation structured -o s.tq
	"$TQ_BIN/tq-fit" -d 24 --rotation auto -o a.tq
	assert_equal "$(jfield d.tq rotation)" '"dense"'
	assert_equal "$(jfield s.tq rotation)" '"structured"'
	cmp a.tq d.tq	# auto is dense below 256 dimensions
	"$TQ_BIN/tq-fit" -d 24 --scale-search -o x.tq
	! cmp -s x.tq a.tq || false
	assert_equal "$(jfield x.tq scale_search)" true
}

@test "tq-fit: auto rotation is dense below 256 dimensions, else Hadamard" {
	"$TQ_BIN/tq-fit" -d 255 -o a255.tq
	assert_equal "$(jfield a255.tq rotation)" '"dense"'
	"$TQ_BIN/tq-fit" -d 300 -o a300.tq
	"$TQ_BIN/tq-fit" -d 300 --rotation hadamard -o h300.tq
	"$TQ_BIN/tq-fit" -d 300 --rotation-block 1 -o b300.tq
	"$TQ_BIN/tq-fit" -d 300 --rotation dense -o d300.tq
	"$TQ_BIN/tq-fit" -d 300 --rotation structured -o s300.tq
	cmp a300.tq h300.tq
	assert_equal "$(jfield a300.tq rotation)" '"hadamard"'
	"$TQ_BIN/tq-inspect" a300.tq | grep -qx 'rotation hadamard'
	! "$TQ_BIN/tq-inspect" a300.tq | grep -q 'rotation-blocks'
	# A block width asks for a structured rotation, auto or not.
	assert_equal "$(jfield b300.tq rotation)" '"structured"'
	assert_equal "$(jfield b300.tq rotation_blocks)" 17
	assert_equal "$(jfield b300.tq rotation_rounds)" 5
	assert_equal "$(jfield d300.tq rotation)" '"dense"'
	# --rotation structured alone keeps the wide layout.
	assert_equal "$(jfield s300.tq rotation_rounds)" 3
	# Four rounds of a permutation and two sign vectors (256 < 300):
	# 4 * (2 + 4 * 3 * 300) bytes of ROTM, where a dense one has 300^2.
	"$TQ_BIN/tq-inspect" a300.tq | grep -q '^  ROTM .* length 14408 '
	run --separate-stderr "$TQ_BIN/tq-fit" -d 300 --rotation hadamard \
	    --rotation-block 4 -o x.tq
	assert_status 2
	[ ! -e x.tq ]
}

@test "tq-fit --rotation hadamard: every dimension, re-ranked results as a dense rotation's, a decode close to the input" {
	local d
	for d in 1 2 3 5 64 100 257 1000; do
		"$TQ_BIN/tq-fit" -d $d --rotation hadamard -o h$d.tq
		"$TQ_BIN/tq-inspect" --verify h$d.tq >/dev/null
	done
	mkfix c.bin 96 600 5 --clusters 8
	mkfix q.bin 96 20 6 --clusters 8
	"$TQ_BIN/tq-fit" -i c.bin --rotation hadamard -o had.tq
	"$TQ_BIN/tq-fit" -i c.bin --rotation dense -o dense.tq
	for r in had dense; do
		"$TQ_BIN/tq-build" -q $r.tq -o $r.tqi c.bin
		"$TQ_BIN/tq-search" -k 5 --oversample 20 $r.tqi <q.bin >$r.out
	done
	# Re-ranked on exact distances, both find the same neighbours.
	cmp had.out dense.out
	# 4-bit codes decode to within a few per cent of the input.
	"$TQ_BIN/tq-encode" -q had.tq -i q.bin -o q.codes
	"$TQ_BIN/tq-encode" -q had.tq --decode -i q.codes -o q.dec
	"$PY" - q.bin q.dec <<'EOF'
import struct, sys
def rows(p):
    b = open(p, "rb").read()
    d, n = struct.unpack_from("<II", b)
    v = struct.unpack_from("<%df" % (d * n), b, 8)
    return [v[i * d:(i + 1) * d] for i in range(n)]
x, y = rows(sys.argv[1]), rows(sys.argv[2])
assert len(x) == len(y) == 20
for a, b in zip(x, y):
    e = sum((p - q) ** 2 for p, q in zip(a, b)) / sum(p * p for p in a)
    assert e < 0.05, e
EOF
}

@test "tq-fit: odd dimensions 1, 3, 17 and a structured 33" {
	for d in 1 3 17; do
		"$TQ_BIN/tq-fit" -d $d -o q$d.tq
		"$TQ_BIN/tq-inspect" --verify q$d.tq
	done
	"$TQ_BIN/tq-fit" -d 33 -b 3 --rotation structured -o s.tq
	"$TQ_BIN/tq-inspect" --verify s.tq
}

@test "tq-fit --rotation-block: narrow structured blocks, same search results as a wide one" {
	mkfix c.bin 64 500 5 --clusters 8
	mkfix q.bin 64 20 6 --clusters 8
	"$TQ_BIN/tq-fit" -i c.bin --rotation structured -o wide.tq
	"$TQ_BIN/tq-fit" -i c.bin --rotation-block 8 -o narrow.tq
	"$TQ_BIN/tq-fit" -i c.bin --rotation-block 1 -o one.tq
	"$TQ_BIN/tq-inspect" --verify narrow.tq
	assert_equal "$(jfield narrow.tq rotation)" '"structured"'
	assert_equal "$(jfield narrow.tq rotation_blocks)" 8
	assert_equal "$(jfield narrow.tq rotation_rounds)" 5
	assert_equal "$(jfield wide.tq rotation_blocks)" 1
	assert_equal "$(jfield wide.tq rotation_rounds)" 3
	"$TQ_BIN/tq-inspect" narrow.tq | grep -qx 'rotation-blocks 8 in 5 rounds'
	# 8 blocks of 8 in five rounds against one block of 64 in three.
	local w n
	w=$(stat -c %s wide.tq)
	n=$(stat -c %s narrow.tq)
	[ "$n" -lt $((w / 4)) ] || { echo "wide $w narrow $n"; false; }
	cmp narrow.tq one.tq	# 8 = sqrt(64): both the narrowest
	for r in wide narrow; do
		"$TQ_BIN/tq-build" -q $r.tq -o $r.tqi c.bin
		"$TQ_BIN/tq-search" -k 5 --oversample 8 $r.tqi <q.bin >$r.out
	done
	# Re-ranked on exact distances, both find the same neighbours.
	cmp wide.out narrow.out
	run --separate-stderr "$TQ_BIN/tq-fit" -d 8 --rotation-block 257 -o x.tq
	assert_status 2
	run --separate-stderr "$TQ_BIN/tq-fit" -d 8 --rotation-block 0 -o x.tq
	assert_status 2
	[ ! -e x.tq ]
}

@test "tq-fit -i -: reads the corpus from stdin" {
	mkfix c.bin 16 100 5
	"$TQ_BIN/tq-fit" -i - -o a.tq <c.bin
	"$TQ_BIN/tq-fit" -i c.bin -o b.tq
	cmp a.tq b.tq
}

@test "tq-fit -i with NaN in the corpus: exit 1 naming the file, no output" {
	mkfix c.bin 16 100 5 --nan 17
	run --separate-stderr "$TQ_BIN/tq-fit" -i c.bin -o a.tq
	assert_fail1 tq-fit c.bin
	assert_only_files . c.bin
}

@test "tq-fit -i on an empty corpus: exit 1 naming the file" {
	mkbytes e.bin '\x10\x00\x00\x00\x00\x00\x00\x00'	# dim 16, n 0
	run --separate-stderr "$TQ_BIN/tq-fit" -i e.bin -o a.tq
	assert_fail1 tq-fit e.bin
	: >z.bin
	run --separate-stderr "$TQ_BIN/tq-fit" -i z.bin -o a.tq
	assert_fail1 tq-fit z.bin
	assert_only_files . e.bin z.bin
}

@test "tq-fit: a failed run leaves an existing output untouched" {
	"$TQ_BIN/tq-fit" -d 16 -o a.tq
	cp a.tq saved.tq
	mkfix c.bin 16 100 5 --nan 3
	run --separate-stderr "$TQ_BIN/tq-fit" -i c.bin -o a.tq
	assert_status 1
	cmp a.tq saved.tq
	assert_only_files . a.tq saved.tq c.bin
}

@test "rows far from the origin against their spread: one warning, the file written" {
	local w="the rows lie 100 times farther from the origin than from their mean, so their codes rank them poorly (tq-fit(1), CAVEATS)"
	# N(0, 1) in 16 dimensions about (100, ..., 100): |mean| 400, spread 4.
	mkfix far.bin 16 400 3 --offset 100
	mkfix near.bin 16 400 3 --offset 1
	run --separate-stderr "$TQ_BIN/tq-fit" -i far.bin -o far.tq
	assert_status 0
	assert_equal "$stderr" "tq-fit: warning: far.bin: $w"
	"$TQ_BIN/tq-inspect" far.tq >/dev/null
	run --separate-stderr "$TQ_BIN/tq-fit" -i near.bin -o near.tq
	assert_status 0
	assert_equal "$stderr" ""
	# Fitted by tq-build and tq-recall: the same, once for two widths.
	run --separate-stderr "$TQ_BIN/tq-build" -o far.tqi far.bin
	assert_status 0
	assert_equal "$stderr" "tq-build: warning: far.bin: $w"
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus far.bin \
	    --queries near.bin -k 5 -b 4,2
	assert_status 0
	assert_equal "$stderr" "tq-recall: warning: far.bin: $w"
	# A quantizer read from a file says nothing.
	run --separate-stderr "$TQ_BIN/tq-build" -q far.tq -o far2.tqi far.bin
	assert_status 0
	assert_equal "$stderr" ""
}
