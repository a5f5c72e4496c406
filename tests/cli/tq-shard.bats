#!/usr/bin/env bats
# tq-build --shard and tq-merge: shards partition the corpus, merges are
# exact where they must be, and inconsistent inputs are refused.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR i
	mkfix "$F/c.bin" 16 100 31 --clusters 5
	mkfix "$F/qs.bin" 16 7 32 --clusters 5
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -b 2 -o "$F/q.tq"
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o "$F/whole.tqi" "$F/c.bin"
	# 100 rows in 3 shards: 0..32, 33..65, 66..99.
	for i in 0 1 2; do
		"$TQ_BIN/tq-build" -q "$F/q.tq" --shard $i/3 -o "$F/s$i.tqi" "$F/c.bin"
	done
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
	C=$F/c.bin
	Q=$F/q.tq
}

# Searches the three shards and the whole index with the given options:
# r0.tsv r1.tsv r2.tsv whole.tsv.
search_all() {
	local i
	for i in 0 1 2; do
		"$TQ_BIN/tq-search" "$@" -i "$F/qs.bin" -o r$i.tsv "$F/s$i.tqi"
	done
	"$TQ_BIN/tq-search" "$@" -i "$F/qs.bin" -o whole.tsv "$F/whole.tqi"
}

@test "tq-build --shard: shard i is the index of its rows alone, with their row numbers as ids" {
	tq rows "$C" a.bin "$(seq -s, 0 32)"
	tq rows "$C" b.bin "$(seq -s, 33 65)"
	tq rows "$C" c.bin "$(seq -s, 66 99)"
	seq 0 32 >a.ids
	seq 33 65 >b.ids
	seq 66 99 >c.ids
	"$TQ_BIN/tq-build" -q "$Q" --ids a.ids -o a.tqi a.bin
	"$TQ_BIN/tq-build" -q "$Q" --ids b.ids -o b.tqi b.bin
	"$TQ_BIN/tq-build" -q "$Q" --ids c.ids -o c.tqi c.bin
	cmp a.tqi "$F/s0.tqi"
	cmp b.tqi "$F/s1.tqi"
	cmp c.tqi "$F/s2.tqi"
	# One shard of one is the whole build.
	"$TQ_BIN/tq-build" -q "$Q" --shard 0/1 -o one.tqi "$C"
	cmp one.tqi "$F/whole.tqi"
}

@test "tq-build --shard with --ids takes the matching lines of the ids file" {
	seq 1000 1099 >all.ids
	seq 1033 1065 >b.ids
	tq rows "$C" b.bin "$(seq -s, 33 65)"
	"$TQ_BIN/tq-build" -q "$Q" --ids all.ids --shard 1/3 -o s.tqi "$C"
	"$TQ_BIN/tq-build" -q "$Q" --ids b.ids -o b.tqi b.bin
	cmp s.tqi b.tqi
	# The ids file must still hold one id per row of the whole corpus.
	seq 1000 1098 >short.ids
	run --separate-stderr "$TQ_BIN/tq-build" -q "$Q" --ids short.ids --shard 1/3 -o x.tqi "$C"
	assert_fail1 tq-build "short.ids: 99 ids for 100 rows"
	assert_only_files . all.ids b.ids b.bin s.tqi b.tqi short.ids
}

@test "tq-build --shard: fvecs, npy and stdin from a file give the same shards" {
	tq tofvecs "$C" c.fvecs
	tq tonpy "$C" c.npy f4 v2
	for i in 0 1 2; do
		"$TQ_BIN/tq-build" -q "$Q" --shard $i/3 -o f$i.tqi c.fvecs
		"$TQ_BIN/tq-build" -q "$Q" --shard $i/3 -o n$i.tqi c.npy
		"$TQ_BIN/tq-build" -q "$Q" --shard $i/3 -o i$i.tqi - <"$C"
		cmp f$i.tqi "$F/s$i.tqi"
		cmp n$i.tqi "$F/s$i.tqi"
		cmp i$i.tqi "$F/s$i.tqi"
	done
}

@test "tq-build --shard: a NaN fails only the shard that holds it, naming its row in the corpus" {
	mkfix bad.bin 16 100 31 --clusters 5 --nan 50
	"$TQ_BIN/tq-build" -q "$Q" --shard 0/3 -o s0.tqi bad.bin
	"$TQ_BIN/tq-build" -q "$Q" --shard 2/3 -o s2.tqi bad.bin
	cmp s0.tqi "$F/s0.tqi"
	cmp s2.tqi "$F/s2.tqi"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$Q" --shard 1/3 -o s1.tqi bad.bin
	assert_fail1 tq-build "bad.bin: row 50, column 0: value is NaN or infinite"
	assert_only_files . bad.bin s0.tqi s2.tqi
}

@test "tq-build --shard: pipes, zstd and empty shards are refused" {
	run --separate-stderr bash -c "cat '$C' | '$TQ_BIN/tq-build' -q '$Q' --shard 0/2 -o x.tqi -"
	assert_fail1 tq-build "tq-build: stdin: --shard needs a row count known in advance (an uncompressed file or HDF5, not a pipe or zstd)"
	zstd -q -o c.bin.zst "$C"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$Q" --shard 0/2 -o x.tqi c.bin.zst
	assert_fail1 tq-build "tq-build: c.bin.zst: --shard needs a row count known in advance"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$Q" --shard 0/101 -o x.tqi "$C"
	assert_fail1 tq-build "tq-build: $C: shard 0/101 is empty: 100 rows for 101 shards"
	assert_only_files . c.bin.zst
}

@test "tq-build --shard: usage errors" {
	run --separate-stderr "$TQ_BIN/tq-build" -q "$Q" --shard 3/3 -o x.tqi "$C"
	assert_usage_error tq-build
	assert_equal "${stderr_lines[0]}" "tq-build: shard number '3' out of range 0..2"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$Q" --shard 1 -o x.tqi "$C"
	assert_usage_error tq-build
	assert_equal "${stderr_lines[0]}" "tq-build: shard '1' is not i/n"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$Q" --shard 0/0 -o x.tqi "$C"
	assert_usage_error tq-build
	assert_equal "${stderr_lines[0]}" "tq-build: shard count '0' out of range 1..1000000"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$Q" --shard -1/3 -o x.tqi "$C"
	assert_usage_error tq-build
	assert_equal "${stderr_lines[0]}" "tq-build: shard number '-1' is not a number"
	run --separate-stderr "$TQ_BIN/tq-build" --shard 0/3 -o x.tqi "$C"
	assert_usage_error tq-build
	assert_equal "${stderr_lines[0]}" "tq-build: --shard needs -q: every shard must use the same quantizer"
	run --separate-stderr "$TQ_BIN/tq-build" --append --shard 0/3 "$F/whole.tqi" "$C"
	assert_usage_error tq-build
	assert_equal "${stderr_lines[0]}" "tq-build: --shard goes with a new build, not --append, --delete or --compact"
	assert_only_files .
}

@test "tq-merge of one result is that result, in every output format" {
	"$TQ_BIN/tq-search" -k 5 -i "$F/qs.bin" -o r.tsv "$F/whole.tqi"
	"$TQ_BIN/tq-search" -k 5 --format json -i "$F/qs.bin" -o r.json "$F/whole.tqi"
	"$TQ_BIN/tq-search" -k 5 --format ivecs -i "$F/qs.bin" -o r.ivecs "$F/whole.tqi"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 r.tsv
	assert_status 0
	assert_equal "$stderr" ""
	cmp <(printf '%s\n' "$output") r.tsv
	"$TQ_BIN/tq-merge" -q "$Q" -o m.json --format json r.tsv
	cmp m.json r.json
	"$TQ_BIN/tq-merge" -q "$F/whole.tqi" --format ivecs r.json >m.ivecs
	cmp m.ivecs r.ivecs
	"$TQ_BIN/tq-merge" -m l2 - <r.json | cmp - r.tsv
}

@test "tq-merge equals one index when every shard search is exhaustive (re-rank, and 4k >= rows)" {
	# Re-rank of every row: k * oversample >= 100.
	search_all -k 10 --oversample 10
	"$TQ_BIN/tq-merge" -q "$Q" -o merged.tsv r0.tsv r1.tsv r2.tsv
	cmp merged.tsv whole.tsv
	tq tsvcheck merged.tsv 7 10
	# Without re-rank the 4k candidates cover the 100 rows when k >= 25.
	search_all -k 25
	"$TQ_BIN/tq-merge" -q "$Q" r2.tsv r0.tsv r1.tsv | cmp - whole.tsv
	# -k below the inputs' k: the best k of the same lists.
	search_all -k 10 --oversample 10
	"$TQ_BIN/tq-search" -k 3 --oversample 40 -i "$F/qs.bin" -o whole3.tsv "$F/whole.tqi"
	"$TQ_BIN/tq-merge" -k 3 -m l2 r0.tsv r1.tsv r2.tsv | cmp - whole3.tsv
}

@test "tq-merge: the best k of the union, as a second implementation computes it" {
	# Not exhaustive: the merge may beat one index, never lose to it.
	search_all -k 4
	"$TQ_BIN/tq-merge" -m l2 -o merged.tsv r0.tsv r1.tsv r2.tsv
	tq merge l2 4 py.tsv r0.tsv r1.tsv r2.tsv
	cmp merged.tsv py.tsv
	paste merged.tsv whole.tsv | awk -F '\t' '$4 > $8 { bad++ } END { exit bad > 0 }'
	# ip: higher is better.
	"$TQ_BIN/tq-fit" -i "$C" -b 2 -m ip -o ip.tq
	for i in 0 1 2; do
		"$TQ_BIN/tq-build" -q ip.tq --shard $i/3 -o ip$i.tqi "$C"
		"$TQ_BIN/tq-search" -k 4 --format json -i "$F/qs.bin" -o ip$i.json ip$i.tqi
		"$TQ_BIN/tq-search" -k 4 -i "$F/qs.bin" -o ip$i.tsv ip$i.tqi
	done
	"$TQ_BIN/tq-merge" -q ip.tq -o ip.tsv ip0.json ip1.tsv ip2.json
	tq merge ip 4 pyip.tsv ip0.tsv ip1.tsv ip2.tsv
	cmp ip.tsv pyip.tsv
}

@test "tq-merge reads pipes and standard input" {
	search_all -k 10 --oversample 10
	"$TQ_BIN/tq-merge" -m l2 <(cat r0.tsv) - r2.tsv <r1.tsv | cmp - whole.tsv
}

@test "tq-merge refuses inputs that disagree, writing nothing" {
	search_all -k 5
	"$TQ_BIN/tq-search" -k 4 -i "$F/qs.bin" -o k4.tsv "$F/s1.tqi"
	head -15 r1.tsv >short.tsv		# 3 of the 7 queries
	: >empty.tsv
	head -c 30 r1.tsv >cut.tsv
	sed '2s/\t2\t/\t3\t/' r1.tsv >rank.tsv
	sed '1s/\t[^\t]*$/\tx/' r1.tsv >bad.tsv
	sed 's/^\([0-9]*\)\t1\t/\1\t1\t/; 1,5s/^0/1/' r1.tsv >qnum.tsv

	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv r0.tsv short.tsv
	assert_fail1 tq-merge "tq-merge: short.tsv: ends after 3 queries, r0.tsv has more"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv short.tsv r0.tsv
	assert_fail1 tq-merge "tq-merge: r0.tsv: more queries than short.tsv (3)"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv r0.tsv k4.tsv
	assert_fail1 tq-merge "tq-merge: k4.tsv: query 0 has 4 results, r0.tsv has 5 (a different k, or a filtered search)"
	run --separate-stderr "$TQ_BIN/tq-merge" -m ip -o m.tsv r0.tsv r1.tsv
	assert_fail1 tq-merge "tq-merge: r0.tsv: query 0: scores ascend at rank 2, but the metric ranks higher scores first"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv r0.tsv r1.tsv r0.tsv
	assert_fail1 tq-merge "is also in r0.tsv (overlapping shards?)"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv r0.tsv empty.tsv
	assert_fail1 tq-merge "tq-merge: empty.tsv: no results"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv empty.tsv r0.tsv
	assert_fail1 tq-merge "tq-merge: empty.tsv: no results"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv r0.tsv missing.tsv
	assert_fail1 tq-merge "tq-merge: missing.tsv: No such file or directory"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv r0.tsv cut.tsv
	assert_fail1 tq-merge "tq-merge: cut.tsv: line 2: no newline at the end (truncated?)"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv r0.tsv rank.tsv
	assert_fail1 tq-merge "tq-merge: rank.tsv: line 2: query 0: rank 3 where 2 was expected"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv r0.tsv bad.tsv
	assert_fail1 tq-merge "tq-merge: bad.tsv: line 1: not a tq-search result (query<TAB>rank<TAB>id<TAB>score)"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -o m.tsv r0.tsv qnum.tsv
	assert_fail1 tq-merge "tq-merge: qnum.tsv: line 1: query 1 where query 0 was expected"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -k 6 -o m.tsv r0.tsv r1.tsv
	assert_fail1 tq-merge "tq-merge: r0.tsv: k (6) exceeds its 5 results per query"
	run --separate-stderr "$TQ_BIN/tq-merge" -q nope.tq -o m.tsv r0.tsv
	assert_fail1 tq-merge "tq-merge: nope.tq: "
	assert_only_files . r0.tsv r1.tsv r2.tsv whole.tsv k4.tsv short.tsv \
	    empty.tsv cut.tsv rank.tsv bad.tsv qnum.tsv
	# On standard output, nothing either: the output is held back.
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 r0.tsv short.tsv
	assert_fail1 tq-merge "short.tsv: ends after 3 queries"
	assert_equal "$output" ""
}

@test "tq-merge: JSON inputs are checked as strictly" {
	"$TQ_BIN/tq-search" -k 3 --format json -i "$F/qs.bin" -o a.json "$F/s0.tqi"
	sed '1s/"scores":\[[^,]*,/"scores":[/' a.json >fewer.json
	sed '1s/"query":0/"query":1/' a.json >q.json
	printf '{"query":0,"ids":[],"scores":[]}\n' >none.json
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 a.json fewer.json
	assert_fail1 tq-merge "tq-merge: fewer.json: line 1: query 0: the ids and scores differ in number"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 a.json q.json
	assert_fail1 tq-merge "tq-merge: q.json: line 1: query 1 where query 0 was expected"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 none.json
	assert_fail1 tq-merge "tq-merge: none.json: query 0 has no results"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 --format ivecs -o x.ivecs a.json
	assert_status 0
	tq ivecscheck x.ivecs 7 3
}

@test "tq-merge: usage errors" {
	run --separate-stderr "$TQ_BIN/tq-merge" r.tsv
	assert_usage_error tq-merge
	assert_equal "${stderr_lines[0]}" "tq-merge: give the metric with exactly one of -m and -q"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -q "$Q" r.tsv
	assert_usage_error tq-merge
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2
	assert_usage_error tq-merge
	assert_equal "${stderr_lines[0]}" "tq-merge: missing result files"
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 - -
	assert_usage_error tq-merge
	assert_equal "${stderr_lines[0]}" "tq-merge: standard input given twice"
	run --separate-stderr "$TQ_BIN/tq-merge" -m hamming r.tsv
	assert_usage_error tq-merge
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 -k 0 r.tsv
	assert_usage_error tq-merge
	run --separate-stderr "$TQ_BIN/tq-merge" -m l2 --format csv r.tsv
	assert_usage_error tq-merge
	assert_equal "${stderr_lines[0]}" "tq-merge: format 'csv' is not one of tsv, json, ivecs"
}

@test "the Slurm scripts are valid bash and refuse bad arguments" {
	local s
	for s in submit build-shards.sbatch search-shards.sbatch merge.sbatch; do
		bash -n "$TOP/scripts/slurm/$s"
	done
	run --separate-stderr "$TOP/scripts/slurm/submit" -n 0 a b c d
	assert_status 2
	run --separate-stderr "$TOP/scripts/slurm/submit" a b c
	assert_status 2
	run --separate-stderr "$TOP/scripts/slurm/build-shards.sbatch" "$Q" "$C" . 3
	assert_status 1
	[[ "$stderr" == *"not a job array task"* ]] || { show; false; }
}
