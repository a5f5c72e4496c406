#!/usr/bin/env bats
# IVF: tq-fit --lists, tq-build of an IVF index (and --lists, --memory,
# --append), tq-search --probes, tq-recall --lists/--probes/--sweep.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 16 2000 31 --clusters 12
	tq head "$F/c.bin" "$F/a.bin" 1500
	tq rows "$F/c.bin" "$F/b.bin" "$(seq -s, 1500 1999)"
	tq rows "$F/c.bin" "$F/q.bin" 3,250,512,900,1333,1999
	"$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 12 -o "$F/ivf.tqq"
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o "$F/flat.tqq"
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" -o "$F/ivf.tqi" "$F/c.bin"
	"$TQ_BIN/tq-build" -q "$F/flat.tqq" -o "$F/flat.tqi" "$F/c.bin"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
}

@test "tq-fit --lists: inspect shows the lists; same arguments, same bytes" {
	run --separate-stderr "$TQ_BIN/tq-inspect" "$F/ivf.tqq"
	assert_status 0
	[[ "$output" == *$'\nlists 12\n'* ]]
	[[ "$output" == *"  IVFC  "* ]]
	"$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 12 -o again.tqq
	cmp again.tqq "$F/ivf.tqq"
	# auto: round(sqrt(2000)) = 45.
	"$TQ_BIN/tq-fit" -i "$F/c.bin" --lists auto -o auto.tqq
	run --separate-stderr "$TQ_BIN/tq-inspect" --json auto.tqq
	[[ "$output" == *'"lists":45'* ]]
	# The flat quantizer says 0 in JSON and nothing in text.
	run --separate-stderr "$TQ_BIN/tq-inspect" --json "$F/flat.tqq"
	[[ "$output" == *'"lists":0'* ]]
	run --separate-stderr "$TQ_BIN/tq-inspect" "$F/flat.tqq"
	[[ "$output" != *"lists"* ]]
}

@test "tq-fit --lists: bad values and too few rows" {
	run --separate-stderr "$TQ_BIN/tq-fit" -d 16 --lists 4 -o x.tqq
	assert_usage_error tq-fit
	[[ "${stderr_lines[0]}" == *"--lists needs -i corpus"* ]]
	run --separate-stderr "$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 0 -o x.tqq
	assert_usage_error tq-fit
	run --separate-stderr "$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 3000 -o x.tqq
	assert_fail1 tq-fit c.bin "3000 lists need at least 3000 sample rows"
	run --separate-stderr "$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 10 --train 5 -o x.tqq
	assert_fail1 tq-fit "10 lists need at least 10 sample rows; the data gave 5"
	run --separate-stderr "$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 4 --iterations 0 -o x.tqq
	assert_usage_error tq-fit
	assert_only_files .
}

@test "tq-build: an IVF index; all probes equal the flat index" {
	run --separate-stderr "$TQ_BIN/tq-inspect" --verify "$F/ivf.tqi"
	assert_status 0
	[[ "$output" == *"  LIST  "* ]]
	[[ "$output" == *$'\nlists 12\n'* ]]
	"$TQ_BIN/tq-search" -k 10 --probes 12 -i "$F/q.bin" "$F/ivf.tqi" >ivf.tsv
	"$TQ_BIN/tq-search" -k 10 -i "$F/q.bin" "$F/flat.tqi" >flat.tsv
	cmp ivf.tsv flat.tsv
	"$TQ_BIN/tq-search" -k 10 --probes 1000 --oversample 4 -i "$F/q.bin" "$F/ivf.tqi" >ivf.tsv
	"$TQ_BIN/tq-search" -k 10 --oversample 4 -i "$F/q.bin" "$F/flat.tqi" >flat.tsv
	cmp ivf.tsv flat.tsv
	# --probes would do nothing to a flat index: refused, not ignored.
	run --separate-stderr "$TQ_BIN/tq-search" -k 10 --probes 1 -i "$F/q.bin" "$F/flat.tqi"
	assert_fail1 tq-search flat.tqi "--probes needs an index with lists"
}

@test "tq-search --probes: fewer probes, results independent of threads and batch" {
	"$TQ_BIN/tq-search" -k 5 --probes 2 --threads 1 -i "$F/q.bin" "$F/ivf.tqi" >a.tsv
	"$TQ_BIN/tq-search" -k 5 --probes 2 --threads 2 --batch 1 -i "$F/q.bin" "$F/ivf.tqi" >b.tsv
	cmp a.tsv b.tsv
	[ "$(wc -l <a.tsv)" -eq 30 ]
	# Each query's own row is in its nearest list: found at rank 1.
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 --probes 1 --oversample 10 -i "$F/q.bin" "$F/ivf.tqi"
	assert_status 0
	assert_equal "$(cut -f3 <<<"$output" | tr '\n' ' ')" "3 250 512 900 1333 1999 "
	run --separate-stderr "$TQ_BIN/tq-search" --probes 0 -i "$F/q.bin" "$F/ivf.tqi"
	assert_usage_error tq-search
	run --separate-stderr "$TQ_BIN/tq-search" --probes x -i "$F/q.bin" "$F/ivf.tqi"
	assert_usage_error tq-search
}

@test "tq-build: threads and --memory do not change an IVF index" {
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" --threads 1 --memory 1 -o a.tqi "$F/c.bin"
	cmp a.tqi "$F/ivf.tqi"
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" --threads 2 -o b.tqi - <"$F/c.bin"
	cmp b.tqi "$F/ivf.tqi"
	assert_only_files . a.tqi b.tqi
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/ivf.tqq" --memory 0 -o c.tqi "$F/c.bin"
	assert_usage_error tq-build
}

@test "tq-build --lists: fits and builds in one go, not from standard input" {
	"$TQ_BIN/tq-build" --lists 12 -o a.tqi "$F/c.bin"
	cmp a.tqi "$F/ivf.tqi"
	run --separate-stderr "$TQ_BIN/tq-build" --lists 12 -o b.tqi - <"$F/c.bin"
	assert_fail1 tq-build "--lists needs a corpus file"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/ivf.tqq" --lists 4 -o b.tqi "$F/c.bin"
	assert_usage_error tq-build
	assert_only_files . a.tqi
}

@test "tq-build --append to an IVF index equals a fresh build; delete and compact" {
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" -o a.tqi "$F/a.bin"
	"$TQ_BIN/tq-build" --append a.tqi "$F/b.bin"
	"$TQ_BIN/tq-search" -k 10 --probes 3 -i "$F/q.bin" a.tqi >a.tsv
	"$TQ_BIN/tq-search" -k 10 --probes 3 -i "$F/q.bin" "$F/ivf.tqi" >u.tsv
	cmp a.tsv u.tsv
	"$TQ_BIN/tq-build" --compact a.tqi
	cmp a.tqi "$F/ivf.tqi"
	seq 0 2 1999 >even.ids
	"$TQ_BIN/tq-build" --delete even.ids -o d.tqi a.tqi
	"$TQ_BIN/tq-build" --compact -o e.tqi d.tqi
	run --separate-stderr "$TQ_BIN/tq-search" -k 3 --probes 12 -i "$F/q.bin" e.tqi
	assert_status 0
	! cut -f3 <<<"$output" | grep -qE '[02468]$'
	run --separate-stderr "$TQ_BIN/tq-inspect" e.tqi
	[[ "$output" == *$'\nvectors 1000\n'* ]]
}

@test "tq-build --dups: copies in several lists, each id returned once" {
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" --dups 3 --dup-ratio 1000000 -o d.tqi "$F/c.bin"
	run --separate-stderr "$TQ_BIN/tq-inspect" d.tqi
	[[ "$output" == *$'\nvectors 6000\n'* ]]
	[[ "$output" == *$'\ncopies 3 lists within ratio 1e+06\n'* ]]
	"$TQ_BIN/tq-search" -k 10 --probes 12 -i "$F/q.bin" d.tqi >d.tsv
	"$TQ_BIN/tq-search" -k 10 -i "$F/q.bin" "$F/flat.tqi" >flat.tsv
	cmp d.tsv flat.tsv
	# Appending keeps the setting.
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" --dups 3 --dup-ratio 1000000 -o a.tqi "$F/a.bin"
	"$TQ_BIN/tq-build" --append a.tqi "$F/b.bin"
	"$TQ_BIN/tq-build" --compact a.tqi
	cmp a.tqi d.tqi
	run --separate-stderr "$TQ_BIN/tq-build" --append --dups 2 a.tqi "$F/b.bin"
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/flat.tqq" --dups 2 -o x.tqi "$F/c.bin"
	assert_fail1 tq-build flat.tqq "--dups needs a quantizer with lists"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/ivf.tqq" --dups 13 -o x.tqi "$F/c.bin"
	assert_fail1 tq-build ivf.tqq "--dups 13 is more than the 12 lists"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/ivf.tqq" --dups 2 --dup-ratio 0.5 -o x.tqi "$F/c.bin"
	assert_usage_error tq-build
	assert_only_files . a.tqi d.tqi d.tsv flat.tsv
}

@test "tq-search: a damaged LIST section is refused" {
	cp "$F/ivf.tqi" bad.tqi
	off=$("$TQ_BIN/tq-inspect" --json bad.tqi | $PY -c '
import json, sys
d = json.load(sys.stdin)
print([s["offset"] for s in d["sections"] if s["tag"] == "LIST"][0])')
	# off[1] = 2^40, past n.
	printf '\x00\x00\x00\x00\x00\x01\x00\x00' | dd of=bad.tqi bs=1 seek=$((off + 8)) conv=notrunc status=none
	run --separate-stderr "$TQ_BIN/tq-search" -i "$F/q.bin" bad.tqi
	assert_fail1 tq-search bad.tqi "section LIST: offset 1 out of order"
	run --separate-stderr "$TQ_BIN/tq-inspect" bad.tqi
	assert_fail1 tq-inspect bad.tqi "section LIST"
}

@test "tq-recall --lists --sweep probes: one row per probes value" {
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" --queries "$F/q.bin" -k 10 \
	    --lists 12 --sweep probes=1,12 --oversample 1 --json
	assert_status 0
	[[ "$output" == *'"lists":12'* ]]
	[[ "$output" == *'"probes":1,'* ]]
	[[ "$output" == *'"probes":12,'* ]]
	# All 12 probes: the flat figure.
	r12=$($PY -c 'import json,sys; d=json.loads(sys.argv[1]); print([r["recall_at_10"] for r in d["runs"] if r["probes"]==12][0])' "$output")
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" --queries "$F/q.bin" -k 10 --oversample 1 --json
	rf=$($PY -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["runs"][0]["recall_at_10"])' "$output")
	assert_equal "$r12" "$rf"
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" --queries "$F/q.bin" --probes 2
	assert_usage_error tq-recall
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" --queries "$F/q.bin" --sweep k=1
	assert_usage_error tq-recall
}

@test "tq-fit --lists and tq-build give the same bytes with every kernel (TQ_ISA)" {
	for isa in scalar avx2 avx512 amx; do
		TQ_ISA=$isa "$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 12 -o $isa.tqq
		TQ_ISA=$isa "$TQ_BIN/tq-build" -q "$F/ivf.tqq" -o $isa.tqi "$F/c.bin"
		cmp $isa.tqq "$F/ivf.tqq"
		cmp $isa.tqi "$F/ivf.tqi"
	done
}

@test "80 lists: the bf16 list filter (where the CPU has it) gives sgemm's bytes" {
	# 64 lists or more take the bf16 filter at kernel level avx512 and
	# amx on a CPU with AVX512_BF16 (tq-inspect --cpu: list-filter), its
	# tile products at amx on a CPU with AMX-BF16 (bf16-amx), and sgemm's
	# below; every choice must be the same.  Rows with copies (--dups 2)
	# choose two lists each (sgemm filters those), the others one; cosine
	# normalises first.
	for isa in avx2 avx512 amx; do
		TQ_ISA=$isa "$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 80 -o $isa.tqq
		TQ_ISA=$isa "$TQ_BIN/tq-build" -q avx2.tqq --dups 2 \
		    -o $isa.tqi "$F/c.bin"
		TQ_ISA=$isa "$TQ_BIN/tq-fit" -i "$F/c.bin" -m cosine \
		    --lists 80 -o $isa-cos.tqq
		TQ_ISA=$isa "$TQ_BIN/tq-build" -q avx2-cos.tqq -o $isa-cos.tqi \
		    "$F/c.bin"
		TQ_ISA=$isa "$TQ_BIN/tq-build" -q avx2.tqq -o $isa-1.tqi \
		    "$F/c.bin"
	done
	cmp avx2.tqq avx512.tqq
	cmp avx2.tqi avx512.tqi
	cmp avx2-cos.tqq avx512-cos.tqq
	cmp avx2-cos.tqi avx512-cos.tqi
	cmp avx2-1.tqi avx512-1.tqi
	for f in .tqq .tqi -cos.tqq -cos.tqi -1.tqi; do
		cmp avx2$f amx$f
	done
	# The filter alone turned off, the scan kernel left as it is.
	TQ_LIST_FILTER=sgemm "$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 80 -o off.tqq
	TQ_LIST_FILTER=sgemm "$TQ_BIN/tq-build" -q avx2.tqq -o off.tqi "$F/c.bin"
	cmp avx2.tqq off.tqq
	cmp avx2-1.tqi off.tqi
}

@test "80 lists: single queries get the same lists through every list filter" {
	# From a process's 65th single query on, its lists are first ruled
	# out by products in bf16 (tq-inspect --cpu: single-list-filter: bf16
	# with AVX512_BF16, bf16-fma with AVX2, f32 below or under
	# TQ_LIST_FILTER=sgemm) and the rest scored in the fixed order: the
	# same lists, so the same results, for 500 queries one at a time.
	"$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 80 -o l2.tqq
	"$TQ_BIN/tq-build" -q l2.tqq -o l2.tqi "$F/c.bin"
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -m cosine --lists 80 -o cos.tqq
	"$TQ_BIN/tq-build" -q cos.tqq -o cos.tqi "$F/c.bin"
	run env TQ_LIST_FILTER=sgemm "$TQ_BIN/tq-inspect" --cpu
	[[ "$output" == *"single-list-filter: f32"* ]] || { show; false; }
	for ix in l2 cos; do
		TQ_LIST_FILTER=sgemm "$TQ_BIN/tq-search" -k 5 --probes 3 \
		    --batch 1 -i "$F/b.bin" $ix.tqi >$ix-f32.tsv
		[ "$(wc -l <$ix-f32.tsv)" -eq 2500 ]
		for mode in TQ_LIST_FILTER=fma TQ_ISA=avx2 TQ_ISA=scalar \
		    TQ_UNSET=1; do
			env $mode "$TQ_BIN/tq-search" -k 5 --probes 3 --batch 1 \
			    -i "$F/b.bin" $ix.tqi >$ix-$mode.tsv
			cmp $ix-f32.tsv $ix-$mode.tsv
		done
	done
}

@test "narrow structured rotations: same bytes and results with every kernel (TQ_ISA)" {
	# d = 61, blocks of 7: 5 blocks of 9 and 2 of 8; d = 100, blocks of
	# 28: 4 of 25.  Five rounds, each through the rowa kernels.
	mkfix n61.bin 61 400 5 --clusters 4
	mkfix n100.bin 100 400 6 --clusters 4
	for d in 61 100; do
		w=$([ $d = 61 ] && echo 7 || echo 28)
		for isa in scalar avx2 avx512 amx; do
			TQ_ISA=$isa "$TQ_BIN/tq-fit" -i n$d.bin --lists 4 \
			    --rotation structured --rotation-block $w -o $isa.tqq
			TQ_ISA=$isa "$TQ_BIN/tq-build" -q $isa.tqq -o $isa.tqi \
			    n$d.bin
			TQ_ISA=$isa "$TQ_BIN/tq-search" -k 5 --probes 2 \
			    --oversample 2 -i n$d.bin -o $isa.tsv $isa.tqi
			cmp scalar.tqq $isa.tqq
			cmp scalar.tqi $isa.tqi
			cmp scalar.tsv $isa.tsv
		done
	done
}

@test "tq-fit --lists and tq-build give the same bytes whatever the BLAS threads" {
	for t in 1 2; do
		OPENBLAS_NUM_THREADS=$t "$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 12 -o b$t.tqq
		OPENBLAS_NUM_THREADS=$t "$TQ_BIN/tq-build" -q "$F/ivf.tqq" --threads $t -o b$t.tqi "$F/c.bin"
		cmp b$t.tqq "$F/ivf.tqq"
		cmp b$t.tqi "$F/ivf.tqi"
	done
}

@test "tq-build: IVF compact and append after --delete equal fresh builds of the live rows" {
	# 20000 rows, f16 originals: --memory 1 writes the lists in two windows.
	mkfix big.bin 16 20000 7 --clusters 12
	tq head big.bin old.bin 18000
	tq rows big.bin new.bin @<(seq 18000 19999)
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" --originals f16 -o a.tqi old.bin
	# Deleted: the first row, a run across a block edge, whole blocks,
	# every seventh row of a stretch, and the last row.
	{ echo 0; seq 31 33; seq 4000 4999; seq 9001 7 15000; echo 17999; } >del.ids
	"$TQ_BIN/tq-build" --delete del.ids a.tqi
	kept_ids 18000 del.ids >kept.ids
	tq rows old.bin kept.bin @kept.ids
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" --originals f16 --ids kept.ids -o want.tqi kept.bin
	"$TQ_BIN/tq-build" --compact -o c.tqi a.tqi
	cmp c.tqi want.tqi
	"$TQ_BIN/tq-build" --compact --memory 1 -o c1.tqi a.tqi
	cmp c1.tqi want.tqi
	# New ids continue after the largest, deleted or not: 18000 on.
	{ cat kept.ids; seq 18000 19999; } >all.ids
	tq rows big.bin all.bin @all.ids
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" --originals f16 --ids all.ids -o want2.tqi all.bin
	"$TQ_BIN/tq-build" --append --memory 1 -o b.tqi a.tqi new.bin
	cmp b.tqi want2.tqi
	"$TQ_BIN/tq-build" --append a.tqi new.bin
	"$TQ_BIN/tq-build" --compact a.tqi
	cmp a.tqi want2.tqi
}

@test "tq-fit --residual: codes about each list's centroid, closer estimates" {
	"$TQ_BIN/tq-fit" -b 2 -i "$F/c.bin" --lists 12 --residual -o r.tqq
	"$TQ_BIN/tq-fit" -b 2 -i "$F/c.bin" --lists 12 -o n.tqq
	run --separate-stderr "$TQ_BIN/tq-inspect" r.tqq
	[[ "$output" == *$'\nresidual yes\n'* ]]
	run --separate-stderr "$TQ_BIN/tq-inspect" --json r.tqq
	[[ "$output" == *'"residual":true'* ]]
	run --separate-stderr "$TQ_BIN/tq-inspect" n.tqq
	[[ "$output" != *"residual"* ]]
	run --separate-stderr "$TQ_BIN/tq-inspect" --json n.tqq
	[[ "$output" == *'"residual":false'* ]]
	"$TQ_BIN/tq-build" -q r.tqq -o r.tqi "$F/c.bin"
	"$TQ_BIN/tq-build" -q n.tqq -o n.tqi "$F/c.bin"
	# The same in one go.
	"$TQ_BIN/tq-build" -b 2 --lists 12 --residual -o r2.tqi "$F/c.bin"
	cmp r.tqi r2.tqi
	# Without re-rank, at every list: the clusters' rows lie far closer
	# to their lists' centroids than to the centre, so the estimates
	# rank better.
	tq rows "$F/c.bin" q200.bin "$(seq -s, 0 10 1999)"
	tq truth "$F/c.bin" q200.bin 10 l2 t.ivecs
	"$TQ_BIN/tq-search" -k 10 --probes 12 --format ivecs -i q200.bin \
	    -o r.ivecs r.tqi
	"$TQ_BIN/tq-search" -k 10 --probes 12 --format ivecs -i q200.bin \
	    -o n.ivecs n.tqi
	rr=$(tq recall r.ivecs t.ivecs 10)
	rn=$(tq recall n.ivecs t.ivecs 10)
	assert_ge "$rr" "$(awk -v n="$rn" 'BEGIN { print n + 0.1 }')"
}

@test "tq-fit --residual: same results whatever the threads, batch and kernel" {
	"$TQ_BIN/tq-fit" -b 2 -i "$F/c.bin" --lists 12 --residual -o r.tqq
	"$TQ_BIN/tq-build" -q r.tqq -o r.tqi "$F/c.bin"
	for o in 1 4 auto; do
		"$TQ_BIN/tq-search" -k 5 --probes 3 --oversample $o \
		    --threads 1 -i "$F/q.bin" r.tqi >want
		"$TQ_BIN/tq-search" -k 5 --probes 3 --oversample $o \
		    --threads 2 --batch 1 -i "$F/q.bin" r.tqi >got
		cmp want got
		for isa in scalar avx2 avx512 amx; do
			TQ_ISA=$isa "$TQ_BIN/tq-build" -q r.tqq -o $isa.tqi \
			    "$F/c.bin"
			cmp $isa.tqi r.tqi
			TQ_ISA=$isa "$TQ_BIN/tq-search" -k 5 --probes 3 \
			    --oversample $o -i "$F/q.bin" r.tqi >got
			cmp want got
		done
	done
	# Each query's own row, at rank 1 from its list alone.
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 --probes 1 \
	    --oversample 10 -i "$F/q.bin" r.tqi
	assert_equal "$(cut -f3 <<<"$output" | tr '\n' ' ')" "3 250 512 900 1333 1999 "
}

@test "tq-fit --residual: append, compact and factor forms equal fresh builds" {
	"$TQ_BIN/tq-fit" -b 2 -i "$F/c.bin" --lists 12 --residual -o r.tqq
	"$TQ_BIN/tq-build" -q r.tqq -o r.tqi "$F/c.bin"
	"$TQ_BIN/tq-build" -q r.tqq -o a.tqi "$F/a.bin"
	"$TQ_BIN/tq-build" --append a.tqi "$F/b.bin"
	for o in 1 auto; do
		"$TQ_BIN/tq-search" -k 10 --probes 3 --oversample $o \
		    -i "$F/q.bin" a.tqi >a.tsv
		"$TQ_BIN/tq-search" -k 10 --probes 3 --oversample $o \
		    -i "$F/q.bin" r.tqi >r.tsv
		cmp a.tsv r.tsv
	done
	"$TQ_BIN/tq-build" --compact a.tqi
	cmp a.tqi r.tqi
	# f32 factors, and back: the compact form converts with each row's
	# own list.
	"$TQ_BIN/tq-build" -q r.tqq --factors f32 -o f.tqi "$F/c.bin"
	"$TQ_BIN/tq-build" --compact --factors f16 -o h.tqi f.tqi
	cmp h.tqi r.tqi
	# The f32 factors' keys use each row's list too.
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 --probes 1 \
	    --oversample 10 -i "$F/q.bin" f.tqi
	assert_equal "$(cut -f3 <<<"$output" | tr '\n' ' ')" "3 250 512 900 1333 1999 "
}

@test "tq-fit --lists auto: k-means samples all the rows, not the first ones" {
	# 40 000 rows, the last 14 000 of them from a second cloud: auto fits
	# 200 lists on 25 600 rows, and the first 25 600 would put all the
	# second cloud in the few lists at the first one's edge.
	"$PY" - <<'PYEOF'
import random, struct
random.seed(7)
rows = [[random.gauss(0, 1) + (10 if i >= 26000 and j == 0 else 0)
         for j in range(4)] for i in range(40000)]
for name, sel in (("sorted.bin", rows), ("q.bin", rows[::400])):
    with open(name, "wb") as f:
        f.write(struct.pack("<II", 4, len(sel)))
        for r in sel:
            f.write(struct.pack("<4f", *r))
PYEOF
	"$TQ_BIN/tq-build" --lists auto --no-calibrate -o s.tqi sorted.bin
	"$TQ_BIN/tq-search" -k 1 --probes 1 --stats -i q.bin s.tqi \
	    >/dev/null 2>st.json
	# Rows a probe scans: n / lists = 200 for even lists; 100 queries.
	rows=$(sed -n 's/.*"rows_scanned":\([0-9]*\).*/\1/p' st.json)
	echo "rows scanned $rows" >&2
	[ "$rows" -gt 0 ] && [ "$rows" -lt 60000 ]
}

@test "tq-search: lists too small for k are followed by the next nearest, k results" {
	# 1500 rows in 100 lists (about 15 a list): one probe cannot hold k.
	"$TQ_BIN/tq-build" --lists 100 -o small.tqi "$F/a.bin"
	for args in "--probes 1" "" "--probes 3 --oversample 2" "--probes 1 --oversample auto"; do
		run --separate-stderr "$TQ_BIN/tq-search" -k 50 --stats $args \
		    -i "$F/q.bin" small.tqi
		assert_status 0
		assert_equal "$(cut -f1 <<<"$output" | uniq -c | awk '{ print $1 }' | sort -u)" 50
		probed=$(grep -o '"lists_probed":[0-9]*' <<<"$stderr" | cut -d: -f2)
		[ "$probed" -gt 6 ] || { show; false; }
		# The same a query at a time and on two threads.
		ref=$output
		run --separate-stderr "$TQ_BIN/tq-search" -k 50 --batch 1 \
		    --threads 2 $args -i "$F/q.bin" small.tqi
		assert_status 0
		assert_equal "$output" "$ref"
	done
	# What the probes alone hold is scanned as before: k 5 needs no more.
	"$TQ_BIN/tq-search" -k 5 --probes 2 -i "$F/q.bin" small.tqi >a.tsv
	run --separate-stderr "$TQ_BIN/tq-search" -k 5 --probes 2 --stats \
	    -i "$F/q.bin" small.tqi
	assert_equal "$(grep -o '"lists_probed":[0-9]*' <<<"$stderr" | cut -d: -f2)" 12
	# Lists emptied by deletes: still k results while k rows live.
	seq 0 1479 >most.ids
	"$TQ_BIN/tq-build" --delete most.ids -o few.tqi small.tqi
	run --separate-stderr "$TQ_BIN/tq-search" -k 20 --probes 1 \
	    -i "$F/q.bin" few.tqi
	assert_status 0
	assert_equal "$(wc -l <<<"$output")" $((6 * 20))
	assert_equal "$(cut -f3 <<<"$output" | sort -un | paste -sd,)" "$(seq -s, 1480 1499)"
	# An allow-list of 30 rows, spread over the lists: k 20 gets 20 of
	# them, k 50 all 30 (every list scanned), the same as the flat index.
	seq 0 50 1499 >allow.ids
	"$TQ_BIN/tq-build" -o flat.tqi "$F/a.bin"
	for k in 20 50; do
		run --separate-stderr "$TQ_BIN/tq-search" -k $k --probes 1 \
		    --oversample 4 --allow allow.ids -i "$F/q.bin" small.tqi
		assert_status 0
		ivf=$(cut -f1,3 <<<"$output")
		assert_equal "$(wc -l <<<"$ivf")" $((6 * (k < 30 ? k : 30)))
		if [ $k = 50 ]; then
			run --separate-stderr "$TQ_BIN/tq-search" -k $k \
			    --oversample 4 --allow allow.ids -i "$F/q.bin" flat.tqi
			assert_equal "$(cut -f1,3 <<<"$output" | sort)" "$(sort <<<"$ivf")"
		fi
	done
	# Identical rows: k-means leaves lists empty; the query still gets k.
	tq rows "$F/a.bin" same.bin "$(printf '7,%.0s' $(seq 1 299))7"
	"$TQ_BIN/tq-build" --lists 4 -o same.tqi same.bin
	run --separate-stderr "$TQ_BIN/tq-search" -k 3 -i "$F/q.bin" same.tqi
	assert_status 0
	assert_equal "$(wc -l <<<"$output")" 18
}
