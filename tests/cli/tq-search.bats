#!/usr/bin/env bats
# tq-search: end to end against exact search, formats, threads, errors.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	# A clustered corpus; queries are corpus rows (exact copies) and
	# perturbed corpus rows.
	mkfix "$F/c.bin" 32 2000 11 --clusters 20
	tq rows "$F/c.bin" "$F/qcopy.bin" 5,123,777,1500,1999
	tq rows "$F/c.bin" "$F/qsrc.bin" 3,50,99,150,222,333,444,555,666,777,888,999,1111,1222,1333,1444,1555,1666,1777,1888
	tq perturb "$F/qsrc.bin" "$F/q.bin" 99 0.2
	"$TQ_BIN/tq-build" -o "$F/idx.tqi" "$F/c.bin"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
	C=$F/c.bin
	IDX=$F/idx.tqi
}

@test "tq-search: a copy of a corpus row is found at rank 1 with --oversample 4" {
	run --separate-stderr "$TQ_BIN/tq-search" -k 10 --oversample 4 -i "$F/qcopy.bin" "$IDX"
	assert_status 0
	assert_equal "$stderr" ""
	tq tsvcheck <(printf '%s\n' "$output") 5 10
	assert_equal "$(awk -F'\t' '$2 == 1 { printf "%s ", $3 }' <<<"$output")" "5 123 777 1500 1999 "
	# The re-ranked score of a copy is its exact squared distance, 0.
	awk -F'\t' '$2 == 1 && ($4 > 1e-3 || $4 < -1e-3) { exit 1 }' <<<"$output"
	# Scores ascend for l2.
	awk -F'\t' '$2 > 1 && $4 < prev { exit 1 } { prev = $4 }' <<<"$output"
}

@test "tq-search: defaults are k 10, stdin queries, tsv to stdout" {
	run --separate-stderr "$TQ_BIN/tq-search" "$IDX" <"$F/q.bin"
	assert_status 0
	tq tsvcheck <(printf '%s\n' "$output") 20 10
	a=$output
	run --separate-stderr "$TQ_BIN/tq-search" -k 10 -i "$F/q.bin" --format tsv --oversample 1 "$IDX"
	assert_equal "$output" "$a"
	run --separate-stderr "$TQ_BIN/tq-search" -i - "$IDX" <"$F/q.bin"
	assert_equal "$output" "$a"
	"$TQ_BIN/tq-search" -i "$F/q.bin" -o out.tsv "$IDX"
	assert_equal "$(cat out.tsv)" "$a"
	"$TQ_BIN/tq-search" -i "$F/q.bin" -o - "$IDX" >out2.tsv
	cmp out.tsv out2.tsv
	assert_only_files . out.tsv out2.tsv
}

@test "tq-search: re-ranked results equal tq-recall --truth (recall 1.0000)" {
	tq head "$C" c500.bin 500
	"$TQ_BIN/tq-build" -o i500.tqi c500.bin
	"$TQ_BIN/tq-search" -k 10 --oversample 50 --format ivecs -i "$F/q.bin" -o res.ivecs i500.tqi
	"$TQ_BIN/tq-recall" --truth -k 10 -o truth.ivecs c500.bin "$F/q.bin"
	run --separate-stderr "$TQ_BIN/tq-recall" res.ivecs truth.ivecs
	assert_status 0
	assert_equal "$output" "$(printf 'recall@1 1.0000\nrecall@10 1.0000')"
	# Same ids in the same order.
	cmp res.ivecs truth.ivecs
}

@test "tq-search: quantized search alone has sane recall (4-bit)" {
	"$TQ_BIN/tq-recall" --truth -k 10 -o truth.ivecs "$C" "$F/q.bin"
	"$TQ_BIN/tq-search" -k 10 --format ivecs -i "$F/q.bin" -o res.ivecs "$IDX"
	assert_ge "$(tq recall res.ivecs truth.ivecs 10)" 0.7
	"$TQ_BIN/tq-search" -k 10 --oversample 4 --format ivecs -i "$F/q.bin" -o res4.ivecs "$IDX"
	assert_ge "$(tq recall res4.ivecs truth.ivecs 10)" 0.95
}

@test "tq-search: output identical for --threads 1 and 2" {
	for os in 1 4; do
		"$TQ_BIN/tq-search" --threads 1 --oversample $os -i "$F/q.bin" -o t1.tsv "$IDX"
		"$TQ_BIN/tq-search" --threads 2 --oversample $os -i "$F/q.bin" -o t2.tsv "$IDX"
		cmp t1.tsv t2.tsv
	done
}

@test "tq-search: output identical for --batch 1, 7 and the default" {
	"$TQ_BIN/tq-search" -i "$F/q.bin" -o ref.tsv "$IDX"
	for b in 1 7; do
		"$TQ_BIN/tq-search" --batch $b -i "$F/q.bin" -o b.tsv "$IDX"
		cmp ref.tsv b.tsv
		"$TQ_BIN/tq-search" --batch $b --oversample 4 -i "$F/q.bin" -o b.tsv "$IDX"
		"$TQ_BIN/tq-search" --oversample 4 -i "$F/q.bin" -o r4.tsv "$IDX"
		cmp r4.tsv b.tsv
	done
	run --separate-stderr "$TQ_BIN/tq-search" --batch 0 -i "$F/q.bin" "$IDX"
	[ "$status" -eq 2 ]
}

# kernels_agree INDEX QUERIES: every scan kernel gives the same output.
kernels_agree() {
	local isa flag
	"$TQ_BIN/tq-search" -k 5 -i "$2" -o ref.tsv "$1"
	TQ_ISA=scalar "$TQ_BIN/tq-search" -k 5 -i "$2" -o scalar.tsv "$1"
	cmp ref.tsv scalar.tsv
	for isa in avx2 avx512 amx; do
		case $isa in
		avx512) flag=avx512vbmi ;;
		amx) flag=amx_int8 ;;
		*) flag=$isa ;;
		esac
		grep -qw "$flag" /proc/cpuinfo || continue
		TQ_ISA=$isa "$TQ_BIN/tq-search" -k 5 -i "$2" -o $isa.tsv "$1"
		cmp ref.tsv $isa.tsv
		# A batch of one query at a time: the same results.
		TQ_ISA=$isa "$TQ_BIN/tq-search" -k 5 --batch 1 -i "$2" \
		    -o $isa-1.tsv "$1"
		cmp ref.tsv $isa-1.tsv
	done
}

@test "tq-search: output identical for every scan kernel (TQ_ISA), bits 1-4" {
	mkfix odd.bin 17 45 3
	mkfix oddq.bin 17 7 4
	for b in 1 2 3 4; do
		"$TQ_BIN/tq-build" -b $b -o i$b.tqi "$C"
		kernels_agree i$b.tqi "$F/q.bin"
		"$TQ_BIN/tq-build" -b $b -o odd$b.tqi odd.bin
		kernels_agree odd$b.tqi oddq.bin
	done
}

@test "tq-search --format: tsv, json and ivecs agree and have the right shape" {
	"$TQ_BIN/tq-search" -k 7 -i "$F/q.bin" -o r.tsv "$IDX"
	"$TQ_BIN/tq-search" -k 7 --format json -i "$F/q.bin" -o r.json "$IDX"
	"$TQ_BIN/tq-search" -k 7 --format ivecs -i "$F/q.bin" -o r.ivecs "$IDX"
	tq tsvcheck r.tsv 20 7
	tq jsoncheck r.json 20 7
	tq ivecscheck r.ivecs 20 7
	assert_equal "$(wc -l <r.tsv)" 140
	assert_equal "$(wc -l <r.json)" 20
	"$PY" -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' r.json
	# The same ids and scores in every format.
	local tsv_ids json_ids ivecs_ids
	tsv_ids=$(cut -f3 r.tsv | tr '\n' ' ')
	json_ids=$("$PY" -c 'import json,sys; print(" ".join(str(i) for l in open(sys.argv[1]) for i in json.loads(l)["ids"]), end=" ")' r.json)
	ivecs_ids=$(tq ivecs r.ivecs | tr '\n' ' ')
	assert_equal "$json_ids" "$tsv_ids"
	assert_equal "$ivecs_ids" "$tsv_ids"
	"$PY" -c '
import json, sys
tsv = [float(l.split("\t")[3]) for l in open(sys.argv[1])]
js = [s for l in open(sys.argv[2]) for s in json.loads(l)["scores"]]
assert len(tsv) == len(js)
for a, b in zip(tsv, js):
    assert abs(a - b) <= 1e-6 * max(1.0, abs(a)), (a, b)' r.tsv r.json
}

@test "tq-search: -k 1 and k equal to the index size" {
	mkfix c10.bin 8 10 4
	mkfix q3.bin 8 3 5
	"$TQ_BIN/tq-build" -o i10.tqi c10.bin
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 -i q3.bin i10.tqi
	assert_status 0
	tq tsvcheck <(printf '%s\n' "$output") 3 1
	run --separate-stderr "$TQ_BIN/tq-search" -k 10 -i q3.bin i10.tqi
	assert_status 0
	tq tsvcheck <(printf '%s\n' "$output") 3 10
	# Every row appears once per query.
	assert_equal "$(awk -F'\t' '$1 == 0 { print $3 }' <<<"$output" | sort -n | tr '\n' ' ')" "0 1 2 3 4 5 6 7 8 9 "
}

@test "tq-search: k larger than the index: exit 1 with the spec message" {
	mkfix c10.bin 8 10 4
	mkfix q3.bin 8 3 5
	"$TQ_BIN/tq-build" -o i10.tqi c10.bin
	run --separate-stderr "$TQ_BIN/tq-search" -k 11 -i q3.bin i10.tqi
	assert_status 1
	assert_equal "$stderr" "tq-search: i10.tqi: k (11) exceeds the 10 vectors in the index"
	assert_equal "$output" ""
	run --separate-stderr "$TQ_BIN/tq-search" -k 20 -i q3.bin -o out.tsv i10.tqi
	assert_equal "$stderr" "tq-search: i10.tqi: k (20) exceeds the 10 vectors in the index"
	assert_only_files . c10.bin q3.bin i10.tqi
}

@test "tq-search: queries of another dimension: exit 1 naming the file and both dims" {
	mkfix q16.bin 16 4 5
	run --separate-stderr "$TQ_BIN/tq-search" -i q16.bin "$IDX"
	assert_status 1
	assert_equal "$stderr" "tq-search: q16.bin: dimension 16 does not match the index (32)"
	assert_equal "$output" ""
	run --separate-stderr "$TQ_BIN/tq-search" "$IDX" <q16.bin
	assert_status 1
	assert_equal "$stderr" "tq-search: stdin: dimension 16 does not match the index (32)"
}

@test "tq-search: --oversample on an index without originals: exit 1" {
	"$TQ_BIN/tq-build" --originals none -o none.tqi "$C"
	run --separate-stderr "$TQ_BIN/tq-search" --oversample 4 -i "$F/q.bin" none.tqi
	assert_fail1 tq-search none.tqi
	assert_equal "$output" ""
	# Without re-ranking it searches, and the results equal the f32 index's.
	run --separate-stderr "$TQ_BIN/tq-search" -i "$F/q.bin" none.tqi
	assert_status 0
	assert_equal "$output" "$("$TQ_BIN/tq-search" -i "$F/q.bin" "$IDX")"
	run --separate-stderr "$TQ_BIN/tq-search" --oversample 1 -i "$F/q.bin" none.tqi
	assert_status 0
}

@test "tq-search: f16 originals re-rank nearly as well as f32" {
	"$TQ_BIN/tq-build" --originals f16 -o f16.tqi "$C"
	"$TQ_BIN/tq-recall" --truth -k 10 -o truth.ivecs "$C" "$F/q.bin"
	"$TQ_BIN/tq-search" --oversample 10 --format ivecs -i "$F/q.bin" -o r.ivecs f16.tqi
	assert_ge "$(tq recall r.ivecs truth.ivecs 10)" 0.98
}

@test "tq-search: fvecs, npy and zstd queries give output identical to the fixture" {
	"$TQ_BIN/tq-search" --oversample 2 -i "$F/q.bin" -o ref.tsv "$IDX"
	tq tofvecs "$F/q.bin" q.fvecs
	tq tonpy "$F/q.bin" q.npy
	tq tonpy "$F/q.bin" q8.npy f8
	zstd -q -o q.bin.zst "$F/q.bin"
	zstd -q -o q.npy.zst q.npy
	for f in q.fvecs q.npy q8.npy q.bin.zst q.npy.zst; do
		run --separate-stderr "$TQ_BIN/tq-search" --oversample 2 -i "$f" -o "$f.tsv" "$IDX"
		assert_status 0
		cmp ref.tsv "$f.tsv"
	done
	# zstd through stdin.
	"$TQ_BIN/tq-search" --oversample 2 "$IDX" <q.bin.zst >zin.tsv
	cmp ref.tsv zin.tsv
}

@test "tq-search: a quantizer file is not an index: exit 1 naming it" {
	"$TQ_BIN/tq-fit" -d 32 -o q.tq
	run --separate-stderr "$TQ_BIN/tq-search" -i "$F/q.bin" q.tq
	assert_fail1 tq-search q.tq
}

@test "tq-search: a vector file is not an index: exit 1 naming it" {
	run --separate-stderr "$TQ_BIN/tq-search" -i "$F/q.bin" "$F/q.bin"
	assert_fail1 tq-search q.bin
}

@test "tq-search: NaN in a query: exit 1 naming the file" {
	mkfix qn.bin 32 5 8 --nan 3
	run --separate-stderr "$TQ_BIN/tq-search" -i qn.bin -o out.tsv "$IDX"
	assert_fail1 tq-search qn.bin
	assert_only_files . qn.bin
}

@test "tq-search: malformed query files: exit 1 naming the file" {
	: >empty.bin
	run --separate-stderr "$TQ_BIN/tq-search" -i empty.bin "$IDX"
	assert_fail1 tq-search empty.bin
	tq head "$F/q.bin" short.bin 20
	truncate -s $((8 + 4 * 32 * 10)) short.bin	# claims 20 rows, holds 10
	run --separate-stderr "$TQ_BIN/tq-search" -i short.bin -o out.tsv "$IDX"
	assert_fail1 tq-search short.bin
	assert_only_files . empty.bin short.bin
}

@test "tq-search: bits 1-4 x metrics ip/cosine/l2: recall@10 >= 0.9 with --oversample 10, growing with bits" {
	mkfix c.bin 32 1000 31 --clusters 10
	tq rows c.bin qs.bin 1,77,150,230,310,420,505,640,777,901
	tq perturb qs.bin q.bin 5 0.2
	for m in l2 ip cosine; do
		"$TQ_BIN/tq-recall" --truth -k 10 -m $m -o t$m.ivecs c.bin q.bin
		prev=0
		for b in 1 2 3 4; do
			"$TQ_BIN/tq-build" -b $b -m $m -o i.tqi c.bin
			"$TQ_BIN/tq-search" --oversample 10 --format ivecs -i q.bin -o r.ivecs i.tqi
			r=$(tq recall r.ivecs t$m.ivecs 10)
			# Without re-rank, recall must grow with the bits.
			"$TQ_BIN/tq-search" --format ivecs -i q.bin -o r1.ivecs i.tqi
			r1=$(tq recall r1.ivecs t$m.ivecs 10)
			echo "bits $b metric $m recall@10 $r1, re-ranked $r"
			assert_ge "$r" 0.9
			assert_ge "$r1" "$(awk -v p="$prev" 'BEGIN { print p - 0.03 }')"
			prev=$r1
		done
		assert_ge "$r1" 0.6	# 4 bits, no re-rank
	done
}

@test "tq-search: cosine re-rank equals exact cosine truth; ip likewise" {
	mkfix c.bin 16 300 41 --clusters 5 --scale 3
	mkfix q.bin 16 10 42
	for m in cosine ip; do
		tq truth c.bin q.bin 5 $m t$m.ivecs
		"$TQ_BIN/tq-build" -m $m -o i$m.tqi c.bin
		"$TQ_BIN/tq-search" -k 5 --oversample 60 --format ivecs -i q.bin -o r$m.ivecs i$m.tqi
		cmp r$m.ivecs t$m.ivecs
	done
}

@test "tq-search golden: fixtures/small.search4.tsv" {
	[ -f "$FIXTURES/small.search4.tsv" ] || skip "no golden yet"
	# The golden predates compact factors (FACH), whose f16 rounding moves
	# the estimates in the fourth digit: it holds for the f32 layout.
	"$TQ_BIN/tq-build" -b 4 --factors f32 -o small.tqi "$FIXTURES/small.bin"
	"$TQ_BIN/tq-search" -k 10 -i "$FIXTURES/small.queries.bin" -o got.tsv small.tqi
	# Ids exactly; scores to a relative 1e-5 (BLAS may round differently
	# on another CPU).
	"$PY" - "$FIXTURES/small.search4.tsv" got.tsv <<'EOF'
import sys
want = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
got = [l.rstrip("\n").split("\t") for l in open(sys.argv[2])]
assert len(want) == len(got), (len(want), len(got))
for i, (w, g) in enumerate(zip(want, got)):
    assert w[:3] == g[:3], ("line", i + 1, w, g)
    a, b = float(w[3]), float(g[3])
    assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), ("line", i + 1, w, g)
EOF
}

@test "tq-search golden: re-ranked search equals fixtures/small.truth.ivecs" {
	"$TQ_BIN/tq-build" -o small.tqi "$FIXTURES/small.bin"
	"$TQ_BIN/tq-search" -k 10 --oversample 20 --format ivecs -i "$FIXTURES/small.queries.bin" -o got.ivecs small.tqi
	cmp got.ivecs "$FIXTURES/small.truth.ivecs"
}

@test "tq-search -o to a FIFO writes into it and leaves it a FIFO" {
	mkfifo out.fifo
	cat out.fifo > got.tsv &
	"$TQ_BIN/tq-search" -i "$F/q.bin" -o out.fifo "$IDX"
	wait
	[ -p out.fifo ]
	"$TQ_BIN/tq-search" -i "$F/q.bin" "$IDX" > want.tsv
	cmp want.tsv got.tsv
	run --separate-stderr "$TQ_BIN/tq-build" -o out.fifo "$F/c.bin"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"not a regular file"* ]]
	[ -p out.fifo ]
}

@test "tq-search: norms up to 2^62 for l2 and ip, any finite norm for cosine" {
	"$PY" - <<'PYEOF'
import random, struct
random.seed(3)
base = [[random.gauss(0, 1) for _ in range(8)] for _ in range(200)]
def save(name, rows):
    open(name, 'wb').write(struct.pack('<II', 8, len(rows)) +
        b"".join(struct.pack('<8f', *r) for r in rows))
def scaled(rows, length):
    return [[v / sum(x * x for x in r) ** 0.5 * length for v in r] for r in rows]
save('near.bin', scaled(base, 0.9 * 2 ** 62))
save('over.bin', scaled(base, 1.1 * 2 ** 62))
PYEOF
	tq rows near.bin nearq.bin 4,77,150
	tq rows over.bin overq.bin 4,77,150
	# Just below the limit, l2 and ip find a copy of a row at rank 1.
	for m in l2 ip; do
		"$TQ_BIN/tq-build" -m $m -o near-$m.tqi near.bin
		run --separate-stderr "$TQ_BIN/tq-search" -k 1 --oversample 4 \
		    -i nearq.bin near-$m.tqi
		assert_status 0
		assert_equal "$(cut -f3 <<<"$output" | tr '\n' ' ')" "4 77 150 "
		run --separate-stderr "$TQ_BIN/tq-build" -m $m -o over-$m.tqi \
		    over.bin
		assert_status 1
		[[ $stderr == *"over.bin: row 0: norm 5.07e+18 is too large for $m"* ]]
		[ ! -e over-$m.tqi ]
		run --separate-stderr "$TQ_BIN/tq-search" -i overq.bin near-$m.tqi
		assert_status 1
		[[ $stderr == *"overq.bin: row 0: norm 5.07e+18 is too large for $m"* ]]
	done
	# Cosine normalises: the same rows are no trouble.
	"$TQ_BIN/tq-build" -m cosine -o over-cos.tqi over.bin
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 --oversample 4 \
	    -i overq.bin over-cos.tqi
	assert_status 0
	assert_equal "$(cut -f3 <<<"$output" | tr '\n' ' ')" "4 77 150 "
}
