#!/usr/bin/env bats
# tq-search --stats: the counts say what the search did, and do not
# depend on threads, kernels or batches.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 24 1000 41 --clusters 10
	mkfix "$F/q.bin" 24 37 42 --clusters 10
	"$TQ_BIN/tq-build" -o "$F/flat.tqi" "$F/c.bin"
	"$TQ_BIN/tq-build" -o "$F/f16.tqi" --originals f16 "$F/c.bin"
	"$TQ_BIN/tq-build" -b 2 -o "$F/flat2.tqi" "$F/c.bin"
	"$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 8 -o "$F/ivf.tqq"
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" -o "$F/ivf.tqi" "$F/c.bin"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
}

# field NAME: the value of NAME in the JSON line $stderr (last line).
field() {
	tail -n 1 <<<"$stderr" | grep -o "\"$1\":[0-9.]*" | cut -d: -f2
}

# The counts of the last stats line (the times vary).
counts() {
	tail -n 1 <<<"$stderr" | sed 's/,"t_[a-z]*":[0-9.]*//g'
}

@test "tq-search --stats: flat, fixed oversample: every live row, k*f originals" {
	run --separate-stderr "$TQ_BIN/tq-search" --stats -k 10 --oversample 3 -i "$F/q.bin" "$F/flat.tqi"
	assert_status 0
	assert_equal "$(wc -l <<<"$stderr")" 1
	[[ "$stderr" == '{"queries":37,"lists_probed":0,"rows_scanned":37000,'* ]] || { show; false; }
	assert_equal "$(field candidates)" $((37 * 30))
	assert_equal "$(field reranked)" $((37 * 30))
	assert_equal "$(field originals_read)" $((37 * 30))
	assert_equal "$(field originals_bytes)" $((37 * 30 * 24 * 4))
	assert_equal "$(field refined)" 0
	assert_equal "$(field results)" $((37 * 10))
	for t in t_prepare t_tables t_scan t_refine t_rerank t_wall; do
		[ -n "$(field $t)" ] || { show; false; }
	done
	# A decimal oversample means what it says: k 10 at 1.1, 1.2, 1.3 and
	# 1.6 re-ranks 11, 12, 13 and 16 (floats a little above them once
	# rounded up to 12, 13, 13 and 17).
	for o in 1.1:11 1.2:12 1.3:13 1.6:16 1.05:11; do
		run --separate-stderr "$TQ_BIN/tq-search" --stats -k 10 --oversample ${o%:*} -i "$F/q.bin" "$F/flat.tqi"
		assert_status 0
		assert_equal "$(field originals_read)" $((37 * ${o#*:}))
	done
	# 1 and 2 bits: 1.5 times the candidates, all refined, the best k*f
	# of them by the refined estimate re-ranked.
	run --separate-stderr "$TQ_BIN/tq-search" --stats -k 10 --oversample 3 -i "$F/q.bin" "$F/flat2.tqi"
	assert_status 0
	assert_equal "$(field candidates)" $((37 * 45))
	assert_equal "$(field refined)" $((37 * 45))
	assert_equal "$(field reranked)" $((37 * 30))
	assert_equal "$(field originals_read)" $((37 * 30))
	# f16 originals: half the bytes.
	run --separate-stderr "$TQ_BIN/tq-search" --stats -k 10 --oversample 3 -i "$F/q.bin" "$F/f16.tqi"
	assert_equal "$(field originals_bytes)" $((37 * 30 * 24 * 2))
	# No re-rank: 4k candidates refined, no originals read.
	run --separate-stderr "$TQ_BIN/tq-search" --stats -k 5 -i "$F/q.bin" "$F/flat.tqi"
	assert_equal "$(field refined)" $((37 * 20))
	assert_equal "$(field reranked)" 0
	assert_equal "$(field originals_read)" 0
	# Without --stats nothing is written on stderr.
	run --separate-stderr "$TQ_BIN/tq-search" -k 5 -i "$F/q.bin" "$F/flat.tqi"
	assert_equal "$stderr" ""
}

@test "tq-search --stats: counts equal across threads, kernels and batches" {
	local ref k
	run --separate-stderr "$TQ_BIN/tq-search" --stats --threads 1 --oversample 2.5 -i "$F/q.bin" "$F/ivf.tqi"
	ref=$(counts)
	for args in "--threads 2" "--threads 3 --batch 1" "--threads 2 --batch 5" "--threads 1 --batch 36"; do
		for k in scalar avx2 avx512; do
			run --separate-stderr env TQ_ISA=$k "$TQ_BIN/tq-search" --stats $args --oversample 2.5 -i "$F/q.bin" "$F/ivf.tqi"
			assert_status 0
			assert_equal "$(counts)" "$ref"
		done
	done
	# 2 bits, whose re-rank picks its candidates by the refined estimate:
	# the same counts and the same results.
	run --separate-stderr "$TQ_BIN/tq-search" --stats --threads 1 --oversample 2.5 -i "$F/q.bin" "$F/flat2.tqi"
	local ref2=$(counts) out=$output
	# (TQ_STREAM_DOT=0: single AVX-512 queries read the codes through the
	# dot kernel, as scans from memory do.)
	for args in "--threads 2" "--threads 3 --batch 1" "--threads 2 --batch 5"; do
		for k in scalar avx2 avx512 "avx512 TQ_STREAM_DOT=0"; do
			run --separate-stderr env TQ_ISA=$k "$TQ_BIN/tq-search" --stats $args --oversample 2.5 -i "$F/q.bin" "$F/flat2.tqi"
			assert_status 0
			assert_equal "$(counts)" "$ref2"
			assert_equal "$output" "$out"
		done
	done
	# --stats=batch: one line a batch, numbered, that add up to the run.
	run --separate-stderr "$TQ_BIN/tq-search" --stats=batch --batch 10 --oversample 2.5 -i "$F/q.bin" "$F/ivf.tqi"
	assert_status 0
	assert_equal "$(wc -l <<<"$stderr")" 4
	assert_equal "$(grep -o '"batch":[0-9]*' <<<"$stderr" | cut -d: -f2 | tr '\n' ' ')" "0 1 2 3 "
	assert_equal "$(grep -o '"queries":[0-9]*' <<<"$stderr" | cut -d: -f2 | tr '\n' ' ')" "10 10 10 7 "
	for f in queries lists_probed rows_scanned candidates reranked originals_read originals_bytes results; do
		sum=$(($(grep -o "\"$f\":[0-9]*" <<<"$stderr" | cut -d: -f2 | paste -sd+)))
		[[ "$ref," == *"\"$f\":$sum"[,}]* ]] || { echo "$f: $sum vs $ref" >&2; false; }
	done
}

@test "tq-search --stats: IVF probes change the lists probed and the rows scanned" {
	local prev=0 rows
	for p in 1 2 4 8; do
		run --separate-stderr "$TQ_BIN/tq-search" --stats --probes $p -i "$F/q.bin" "$F/ivf.tqi"
		assert_status 0
		assert_equal "$(field lists_probed)" $((37 * p))
		rows=$(field rows_scanned)
		[ "$rows" -gt "$prev" ] || { show; false; }
		prev=$rows
	done
	# All the lists: every row for every query, as flat.
	assert_equal "$rows" 37000
	run --separate-stderr "$TQ_BIN/tq-search" --stats --probes 100 -i "$F/q.bin" "$F/ivf.tqi"
	assert_equal "$(field lists_probed)" $((37 * 8))
}

@test "tq-search --stats: deleted and filtered rows are not scanned" {
	seq 0 99 >del.ids
	"$TQ_BIN/tq-build" --delete del.ids -o del.tqi "$F/flat.tqi"
	run --separate-stderr "$TQ_BIN/tq-search" --stats -i "$F/q.bin" del.tqi
	assert_equal "$(field rows_scanned)" $((37 * 900))
	seq 100 2 399 >allow.ids
	run --separate-stderr "$TQ_BIN/tq-search" --stats --allow allow.ids -i "$F/q.bin" "$F/flat.tqi"
	assert_equal "$(field rows_scanned)" $((37 * 150))
	# Range search: candidates within the loosened radius, all checked.
	run --separate-stderr "$TQ_BIN/tq-search" --stats --radius 1e30 -i "$F/q.bin" "$F/flat.tqi"
	assert_equal "$(field rows_scanned)" 37000
	assert_equal "$(field candidates)" 37000
	assert_equal "$(field originals_read)" 37000
	assert_equal "$(field results)" 37000
}

@test "tq-search --stats: a value other than batch is a usage error" {
	run --separate-stderr "$TQ_BIN/tq-search" --stats=all -i "$F/q.bin" "$F/flat.tqi"
	assert_status 2
	[[ "$stderr" == "tq-search: --stats takes no value or =batch, not 'all'"* ]] || { show; false; }
	assert_equal "$output" ""
}

@test "tq-search --oversample auto: the same results for every thread count, kernel and batch" {
	local ref
	run --separate-stderr "$TQ_BIN/tq-search" --threads 1 --oversample auto -i "$F/q.bin" "$F/flat.tqi"
	assert_status 0
	ref=$output
	tq tsvcheck <(printf '%s\n' "$ref") 37 10
	for args in "--threads 2" "--threads 3 --batch 1" "--threads 2 --batch 5"; do
		for k in scalar avx2 avx512; do
			run --separate-stderr env TQ_ISA=$k "$TQ_BIN/tq-search" $args --oversample auto -i "$F/q.bin" "$F/flat.tqi"
			assert_status 0
			assert_equal "$output" "$ref"
		done
	done
	# The counts too.
	run --separate-stderr "$TQ_BIN/tq-search" --stats --threads 1 --oversample auto -i "$F/q.bin" "$F/ivf.tqi"
	ref=$(counts)
	run --separate-stderr env TQ_ISA=scalar "$TQ_BIN/tq-search" --stats --threads 2 --batch 3 --oversample auto -i "$F/q.bin" "$F/ivf.tqi"
	assert_equal "$(counts)" "$ref"
	# The candidates the scan drops too, when one query's rows are
	# split between threads, each pruning with what it has seen.
	run --separate-stderr "$TQ_BIN/tq-search" --stats --threads 1 --oversample auto -i "$F/q.bin" "$F/flat.tqi"
	ref=$(counts)
	[ "$(field candidates)" -lt $((37 * 160)) ] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-search" --stats --threads 2 --batch 1 --oversample auto -i "$F/q.bin" "$F/flat.tqi"
	assert_equal "$(counts)" "$ref"
	# IVF and f16 originals too.
	for ix in ivf f16; do
		run --separate-stderr "$TQ_BIN/tq-search" --threads 1 --batch 7 --oversample auto -i "$F/q.bin" "$F/$ix.tqi"
		ref=$output
		run --separate-stderr env TQ_ISA=scalar "$TQ_BIN/tq-search" --threads 2 --oversample auto -i "$F/q.bin" "$F/$ix.tqi"
		assert_equal "$output" "$ref"
	done
}

# The ids of each query of a tsv result, sorted: the set, not the order.
idsets() {
	awk -F'\t' '{ print $1 "\t" $3 }' "$1" | sort -n -k1,1 -k2,2
}

@test "tq-search --oversample auto: the exact top k, ranked, fewer originals" {
	"$TQ_BIN/tq-search" --oversample auto -i "$F/q.bin" -o auto.tsv "$F/flat.tqi"
	"$TQ_BIN/tq-search" --oversample 100 -i "$F/q.bin" -o all.tsv "$F/flat.tqi"
	"$TQ_BIN/tq-recall" --truth -k 10 -o truth.ivecs "$F/c.bin" "$F/q.bin"
	"$TQ_BIN/tq-search" --oversample auto --format ivecs -i "$F/q.bin" -o auto.ivecs "$F/flat.tqi"
	run --separate-stderr "$TQ_BIN/tq-recall" auto.ivecs truth.ivecs
	[[ "$output" == *$'\n''recall@10 1.0000' ]] || { show; false; }
	# What a re-rank of every row gives: the same ids in the same
	# order with the same exact scores (every result is read).
	cmp auto.tsv all.tsv
	# auto-set: the same sets, but results the bound settles are not
	# read: their scores are estimates, and they rank by them.
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto-set -i "$F/q.bin" -o set.tsv "$F/flat.tqi"
	assert_status 0
	rs=$(field originals_read)
	assert_equal "$(idsets set.tsv)" "$(idsets all.tsv)"
	! cmp -s set.tsv all.tsv || { echo "auto-set gave exact scores"; false; }
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto -i "$F/q.bin" "$F/flat.tqi"
	[ "$rs" -lt "$(field originals_read)" ] || { show; echo "auto-set $rs"; false; }
	[ "$(field originals_read)" -le $((rs + 37 * 10)) ] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto-set:0.5 -i "$F/q.bin" "$F/flat.tqi"
	[ "$(field originals_read)" -lt "$rs" ] || { show; false; }
	# Fewer originals than the k * 16 candidates, and the default z
	# is 2.  The scan drops those that cannot matter, but keeps at
	# least the k of the best estimates.
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto -i "$F/q.bin" "$F/flat.tqi"
	cand=$(field candidates)
	[ "$cand" -ge $((37 * 10)) ] && [ "$cand" -le $((37 * 160)) ] || { show; false; }
	r=$(field originals_read)
	[ "$r" -ge 1 ] && [ "$r" -lt $((37 * 160)) ] || { show; false; }
	[ "$(field refined)" -ge "$r" ] && [ "$(field refined)" -le $((37 * 160)) ] || { show; false; }
	assert_equal "$(field reranked)" "$r"
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto:2 -i "$F/q.bin" "$F/flat.tqi"
	assert_equal "$(field originals_read)" "$r"
	# A lower confidence reads fewer, a higher more.
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto:0.5 -i "$F/q.bin" "$F/flat.tqi"
	[ "$(field originals_read)" -lt "$r" ] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto:3 -i "$F/q.bin" "$F/flat.tqi"
	[ "$(field originals_read)" -gt "$r" ] || { show; false; }
}

@test "tq-search --oversample auto: k 1, 64, 65 and 100 find the sets of a re-rank of every row" {
	# k up to 64 keeps the k best lower ends by insertion, above that
	# by sorting: both settle the candidates of the bound, which at
	# z = 2 may miss a few among many (2 of 2368 at k 64 here, 0 at
	# k 1), never more than 1 %.
	for k in 1 64 65 100; do
		"$TQ_BIN/tq-search" -k $k --oversample auto -i "$F/q.bin" -o auto.tsv "$F/flat.tqi"
		"$TQ_BIN/tq-search" -k $k --oversample 1000 -i "$F/q.bin" -o all.tsv "$F/flat.tqi"
		assert_equal "$(wc -l <auto.tsv)" $((37 * k))
		miss=$(comm -13 <(idsets auto.tsv | sort) <(idsets all.tsv | sort) | wc -l)
		[ "$k" -gt 1 ] || assert_equal "$miss" 0
		[ $((miss * 100)) -le $((37 * k)) ] || { echo "k $k: $miss missed"; false; }
	done
}

@test "tq-search --oversample auto: a query the cap of k*16 candidates cut short is searched again" {
	local k miss ref
	# Tight clusters and 2-bit codes: the estimates of many rows overlap
	# the k-th score, more than k * 16 of them.  Before the widening,
	# every candidate was read (640 of 640 at k 1) and 14 of the 40
	# nearest and 13 of the 400 top 10 were missed.
	# Without a calibration, which would start wider (next test).
	mkfix c.bin 24 3000 41 --clusters 10
	mkfix q.bin 24 40 42 --clusters 10
	"$TQ_BIN/tq-build" -b 2 --no-calibrate -o b2.tqi c.bin
	for k in 1 10; do
		run --separate-stderr "$TQ_BIN/tq-search" -k $k --stats --oversample auto -i q.bin b2.tqi
		assert_status 0
		printf '%s\n' "$output" >auto.tsv
		[ "$(field widened)" -gt 0 ] || { show; false; }
		# More candidates than the first pass's k * 16 a query.
		[ "$(field candidates)" -gt $((40 * 16 * k)) ] || { show; false; }
		ref=$(counts)
		"$TQ_BIN/tq-search" -k $k --oversample 1000 -i q.bin -o all.tsv b2.tqi
		miss=$(comm -13 <(idsets auto.tsv | sort) <(idsets all.tsv | sort) | wc -l)
		[ "$miss" -le $((k == 1 ? 1 : 4)) ] || { echo "k $k: $miss missed" >&2; false; }
		# Whatever the threads, kernel and batches: the same results
		# and counts (a query's widening depends on it alone).
		run --separate-stderr env TQ_ISA=scalar "$TQ_BIN/tq-search" -k $k --stats --threads 2 --batch 3 --oversample auto -i q.bin b2.tqi
		assert_equal "$output" "$(cat auto.tsv)"
		assert_equal "$(counts)" "$ref"
	done
}

@test "tq-search --oversample auto: starts wider where the calibration says k*16 is short, with the same results" {
	local k w0 w1
	# The set above: its calibration finds recall@10 0.815 at oversample
	# 8 and 0.976 at 16 (recall@1 0.27 and 0.46), still rising at the
	# cap, so most queries would be searched again.
	mkfix c.bin 24 3000 41 --clusters 10
	mkfix q.bin 24 40 42 --clusters 10
	"$TQ_BIN/tq-build" -b 2 --no-calibrate -o plain.tqi c.bin
	"$TQ_BIN/tq-build" -b 2 -o calib.tqi c.bin
	for k in 1 10; do
		run --separate-stderr "$TQ_BIN/tq-search" -k $k --stats --oversample auto -i q.bin plain.tqi
		assert_status 0
		printf '%s\n' "$output" >plain.tsv
		w0=$(field widened)
		run --separate-stderr "$TQ_BIN/tq-search" -k $k --stats --oversample auto -i q.bin calib.tqi
		assert_status 0
		assert_equal "$output" "$(cat plain.tsv)"
		w1=$(field widened)
		[ "$w1" -lt "$w0" ] || { echo "k $k: widened $w0 -> $w1" >&2; false; }
		# A pass with room for k * 64 a query from the start.
		[ "$(field candidates)" -gt $((40 * 16 * k)) ] || { show; false; }
	done
	# Where the calibration is level at the cap (4 bits: 0.9998 and
	# 1.0000), the same counts as without one.
	"$TQ_BIN/tq-build" -b 4 --no-calibrate -o p4.tqi c.bin
	"$TQ_BIN/tq-build" -b 4 -o c4.tqi c.bin
	"$TQ_BIN/tq-inspect" --calibration c4.tqi |
	    awk '$1 == 10 && $3 == 8 { r8 = $4 } $1 == 10 && $3 == 16 { r16 = $4 }
		END { exit !(r16 != "" && r16 - r8 <= 0.002) }'
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto -i q.bin p4.tqi
	w0=$(counts)
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto -i q.bin c4.tqi
	assert_equal "$(counts)" "$w0"
}

@test "tq-search --oversample auto: the compact factors' rounding is in the bound (1-d data)" {
	local k miss
	# At d = 1 the codes are exact and the f16 factors' rounding is the
	# whole error of an estimate: left out of the bound, 23 of the 40
	# nearest and 112 of the 400 top 10 were missed.
	mkfix c1.bin 1 3000 41 --clusters 30
	mkfix q1.bin 1 40 42 --clusters 30
	"$TQ_BIN/tq-build" -b 4 -o b1.tqi c1.bin
	for k in 1 10; do
		"$TQ_BIN/tq-search" -k $k --oversample auto -i q1.bin -o auto.tsv b1.tqi
		"$TQ_BIN/tq-search" -k $k --oversample 1000 -i q1.bin -o all.tsv b1.tqi
		miss=$(comm -13 <(idsets auto.tsv | sort) <(idsets all.tsv | sort) | wc -l)
		[ "$miss" -le 1 ] || { echo "k $k: $miss missed" >&2; false; }
	done
}

@test "tq-search --oversample auto: estimates past the best score still count as reaching it (2-d cosine)" {
	local miss
	# 2-bit codes of 2-d unit vectors: estimates of cosine run past 1,
	# where the upper ends are clamped below them; counted as negative
	# reach they kept the cap from widening, and 25 of the 40 nearest
	# were missed.
	# Then two more faults at 2 to 4 bits (2, 5 and 3 of 40 missed):
	# the factors' rounding joined the codes' error in quadrature at the
	# estimate's distance, not at the ends' (where the codes' error all
	# but vanishes), and the reach of rows past the cap was taken at the
	# candidates' own, nearer, estimates instead of the lowest kept.
	mkfix c2.bin 2 3000 41 --clusters 30
	mkfix q2.bin 2 40 42 --clusters 30
	for b in 2 3 4; do
		"$TQ_BIN/tq-build" -b $b -m cosine -o b2c.tqi c2.bin
		"$TQ_BIN/tq-search" -k 1 --oversample auto -i q2.bin -o auto.tsv b2c.tqi
		"$TQ_BIN/tq-search" -k 1 --oversample 1000 -i q2.bin -o all.tsv b2c.tqi
		miss=$(comm -13 <(idsets auto.tsv | sort) <(idsets all.tsv | sort) | wc -l)
		[ "$miss" -le 1 ] || { echo "$b bits: $miss missed" >&2; false; }
	done
}

@test "tq-search --oversample auto reaches recall@10 0.99 (4 bits) and 0.98 (2 bits) on clustered data" {
	local b r
	mkfix c64.bin 64 3000 5 --clusters 20
	mkfix q64.bin 64 50 6 --clusters 20
	"$TQ_BIN/tq-recall" --truth -k 10 -o t64.ivecs c64.bin q64.bin
	for b in 2 4; do
		"$TQ_BIN/tq-build" -b $b -o b$b.tqi c64.bin
		run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto --format ivecs -i q64.bin -o r.ivecs b$b.tqi
		assert_status 0
		r=$(field originals_read)
		run --separate-stderr "$TQ_BIN/tq-recall" r.ivecs t64.ivecs
		r10=$(tail -n 1 <<<"$output" | cut -d' ' -f2)
		if [ $b = 4 ]; then
			# A fixed oversample of 4 reads 2000 originals.
			awk -v r="$r10" 'BEGIN { exit !(r >= 0.99) }' || { show; false; }
			[ "$r" -lt 2000 ] || { echo "reads $r" >&2; false; }
		else
			# A fixed oversample of 4 gets 0.80 here.
			awk -v r="$r10" 'BEGIN { exit !(r >= 0.98) }' || { show; false; }
		fi
	done
}

@test "tq-search --oversample auto:z: z from 0.5 to 10" {
	run --separate-stderr "$TQ_BIN/tq-search" --oversample auto:0.4 -i "$F/q.bin" "$F/flat.tqi"
	assert_status 2
	[[ "$stderr" == "tq-search: oversample auto:z '0.4' out of range 0.5..10"* ]] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-search" --oversample auto: -i "$F/q.bin" "$F/flat.tqi"
	assert_status 2
	[[ "$stderr" == "tq-search: oversample auto:z '' is not a number"* ]] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-search" --oversample auto:10 -i "$F/q.bin" "$F/flat.tqi"
	assert_status 0
}

@test "tq-search --oversample auto: WDTH values that are not finite and >= 0 fall back" {
	# Every rho NaN, -1 or +inf: the global bound for every row (the
	# checksum is stale, which only --verify checks).
	"$PY" - "$F/flat.tqi" bad.tqi "$("$TQ_BIN/tq-inspect" --json "$F/flat.tqi")" <<'PYEOF'
import json, struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
s = [x for x in json.loads(sys.argv[3])["sections"] if x["tag"] == "WDTH"][0]
vals = (0x7e00, 0xbc00, 0x7c00)
for i in range(s["length"] // 2):
    struct.pack_into("<H", d, s["offset"] + 2 * i, vals[i % 3])
open(sys.argv[2], "wb").write(d)
PYEOF
	run --separate-stderr "$TQ_BIN/tq-inspect" --verify bad.tqi
	assert_status 1
	"$TQ_BIN/tq-recall" --truth -k 10 -o truth.ivecs "$F/c.bin" "$F/q.bin"
	"$TQ_BIN/tq-search" --oversample auto --format ivecs -i "$F/q.bin" -o r.ivecs bad.tqi
	run --separate-stderr "$TQ_BIN/tq-recall" r.ivecs truth.ivecs
	[[ "$output" == *$'\n''recall@10 1.0000' ]] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-search" --stats --oversample auto -i "$F/q.bin" bad.tqi
	assert_status 0
	[ "$(field originals_read)" -ge 1 ] || { show; false; }
}

@test "tq-search --oversample auto needs originals" {
	"$TQ_BIN/tq-build" --originals none -o none.tqi "$F/c.bin"
	run --separate-stderr "$TQ_BIN/tq-search" --oversample auto -i "$F/q.bin" none.tqi
	assert_status 1
	[[ "$stderr" == "tq-search: none.tqi: --oversample needs originals, and the index has none" ]] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-search" --oversample automatic -i "$F/q.bin" "$F/flat.tqi"
	assert_status 2
}
