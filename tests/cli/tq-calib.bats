#!/usr/bin/env bats
# The calibration for tq-search --recall (tq(5) CALB): made by a build
# (of 1000 rows or more, with originals) before its file is renamed,
# used by --recall, reported by --stats and tq-inspect, stale after
# appends, made again by --recalibrate and --compact.

load helpers

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	mkfix all.bin 16 3300 1 --clusters 12
	"$TQ_BIN/tq-cat" --rows :3000 -o c.bin all.bin
	"$TQ_BIN/tq-cat" --rows 3000:3200 -o q.bin all.bin
	"$TQ_BIN/tq-cat" --rows 3200: -o more.bin all.bin
	"$TQ_BIN/tq-fit" -b 2 -i c.bin -o q.tq
	"$TQ_BIN/tq-fit" -b 2 -i c.bin --lists 16 -o ivf.tq
	"$TQ_BIN/tq-build" -q q.tq --calibrate-sample 500 -o flat.tqi c.bin
	"$TQ_BIN/tq-build" -q ivf.tq --calibrate-sample 500 -o ivf.tqi c.bin
	"$TQ_BIN/tq-recall" --truth -k 10 -o truth.ivecs c.bin q.bin
}

setup() {
	cd "$BATS_FILE_TMPDIR"
}

# recall@10 of a search with the given options against truth.ivecs.
recall_of() {
	"$TQ_BIN/tq-search" -k 10 --format ivecs -i q.bin -o res.ivecs "$@"
	"$TQ_BIN/tq-recall" --json res.ivecs truth.ivecs |
	    "$PY" -c 'import json,sys; print(json.load(sys.stdin)["recall_at_10"])'
}

@test "a build is calibrated unless it has no originals, too few rows or --no-calibrate" {
	"$TQ_BIN/tq-build" -q q.tq -o unasked.tqi c.bin
	run "$TQ_BIN/tq-inspect" unasked.tqi
	[[ "$output" == *$'\n''calibration 500 queries (rows of the index) at 3000 live rows'* ]] || { show; false; }
	cmp unasked.tqi flat.tqi
	"$TQ_BIN/tq-build" -q q.tq --no-calibrate -o off.tqi c.bin
	"$TQ_BIN/tq-build" -q q.tq --originals none -o none.tqi c.bin
	"$TQ_BIN/tq-cat" --rows :999 -o c999.bin c.bin
	"$TQ_BIN/tq-build" -q q.tq -o few.tqi c999.bin
	for f in off none few; do
		run "$TQ_BIN/tq-inspect" $f.tqi
		[[ "$output" != *calibration* ]] || { show; false; }
	done
	# Asked, a build with too few rows fails and writes nothing.
	"$TQ_BIN/tq-cat" --rows :80 -o c80.bin c.bin
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq --calibrate-sample 20 -o asked.tqi c80.bin
	assert_fail1 tq-build
	[ ! -e asked.tqi ]
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq --originals none --calibrate-sample 20 -o asked.tqi c.bin
	assert_fail1 tq-build
	assert_equal "$stderr" "tq-build: asked.tqi: calibration needs originals, and the index has none"
	run "$TQ_BIN/tq-inspect" flat.tqi
	assert_status 0
	[[ "$output" == *$'\n''calibration 500 queries (rows of the index) at 3000 live rows, k 1,10,100, '*' settings measured'$'\n'* ]] || { show; false; }
	run "$TQ_BIN/tq-inspect" --json ivf.tqi
	[[ "$output" == *'"calibration":{"source":"rows","queries":500,"live":3000,"k":[1,10,100],"settings":'*',"stale":false}'* ]] || { show; false; }
	"$TQ_BIN/tq-inspect" --verify flat.tqi >/dev/null
}

@test "a build killed while it calibrates leaves the old file; one that finishes is calibrated" {
	mkdir -p kill && cd kill
	"$TQ_BIN/tq-build" -q ../q.tq --no-calibrate -o k.tqi ../more.bin
	cp k.tqi ../old.tqi
	for point in written calibrated table synced slot; do
		st=0
		TQ_TEST_CRASH=$point "$TQ_BIN/tq-build" -q ../q.tq -o k.tqi ../c.bin 2>/dev/null || st=$?
		[ "$st" -eq 137 ] || { echo "$point: exit $st"; false; }
		cmp k.tqi ../old.tqi
		rm -f .k.tqi.tmp.*
	done
	"$TQ_BIN/tq-build" -q ../q.tq -o k.tqi ../c.bin
	cmp k.tqi ../flat.tqi
	assert_only_files . k.tqi
}

@test "--recall reaches its target on held-out queries, flat and IVF" {
	local ix r got
	for ix in flat.tqi ivf.tqi; do
		for r in 0.8 0.9 0.95; do
			got=$(recall_of --recall "$r" "$ix")
			"$PY" -c "import sys; sys.exit(not $got >= $r - 0.02)" ||
			    { echo "$ix --recall $r: recall@10 $got" >&2; false; }
		done
	done
}

@test "--stats says what --recall chose, and the choice is the explicit setting" {
	local p o
	run --separate-stderr "$TQ_BIN/tq-search" --recall 0.9 --stats -k 10 -i q.bin -o r1.tsv ivf.tqi
	assert_status 0
	[[ "$stderr" == '{"recall_target":0.9,"recall_k":10,"probes":'*',"oversample":'*',"calibrated_recall":'*',"calibrated_se":'*',"recall_reached":true,"calibration_stale":false,"queries":200,'* ]] || { show; false; }
	p=$(printf '%s' "$stderr" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["probes"])')
	o=$(printf '%s' "$stderr" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["oversample"])')
	[ "$p" -ge 1 ]
	"$TQ_BIN/tq-search" --probes "$p" --oversample "$o" -k 10 -i q.bin -o r2.tsv ivf.tqi
	cmp r1.tsv r2.tsv
	# Without --recall the stats line is as before.
	run --separate-stderr "$TQ_BIN/tq-search" --stats -k 10 -i q.bin -o /dev/null ivf.tqi
	[[ "$stderr" == '{"queries":200,'* ]] || { show; false; }
}

@test "tq-inspect --calibration lists every measured setting; --recall chooses among them" {
	local n stats
	run "$TQ_BIN/tq-inspect" --calibration ivf.tqi
	assert_status 0
	n=$(sed -n 's/^calibration .*, \([0-9]*\) settings measured$/\1/p' <<<"$output")
	[ "$n" -gt 0 ]
	# The header, then a line per setting.
	[ "$(grep -c '^ *k  *probes  *oversample  *recall ' <<<"$output")" -eq 1 ]
	[ "$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+ +[01]\.[0-9]{4} ' <<<"$output")" -eq "$n" ]
	# JSON: the same entries; flat: probes 0 and "-" in the table.
	"$TQ_BIN/tq-inspect" --calibration --json flat.tqi >flat.json
	stats=$("$TQ_BIN/tq-search" --recall 0.9 --stats -k 10 -i q.bin -o /dev/null flat.tqi 2>&1 >/dev/null)
	"$PY" - flat.json "$stats" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["calibration"]
e = c["entries"]
assert len(e) == c["settings"] > 0, (len(e), c["settings"])
assert all(x["probes"] == 0 and 0 <= x["recall"] <= 1 and x["se"] >= 0 for x in e)
assert [x["k"] for x in e] == sorted(x["k"] for x in e)
s = json.loads(sys.argv[2])
# The choice of a flat index is a measured entry at the calibrated k.
m = [x for x in e if x["k"] == s["recall_k"] and
     x["oversample"] == s["oversample"]]
assert len(m) == 1 and abs(m[0]["recall"] - s["calibrated_recall"]) < 1e-4, (m, s)
PY
	run "$TQ_BIN/tq-inspect" --calibration flat.tqi
	[[ "$output" == *$'\n''    10       -          1 '* ]] || { show; false; }
	# Nothing to list without a calibration.
	"$TQ_BIN/tq-build" -q q.tq --no-calibrate -o nocal.tqi c.bin
	run "$TQ_BIN/tq-inspect" --calibration nocal.tqi
	assert_status 0
	[[ "$output" != *oversample* ]] || { show; false; }
	run "$TQ_BIN/tq-inspect" --calibration --json nocal.tqi
	[[ "$output" != *entries* ]] || { show; false; }
}

@test "a higher target never chooses a cheaper setting" {
	local r prev=0 cost
	for r in 0.5 0.8 0.9 0.95 0.99; do
		cost=$("$TQ_BIN/tq-search" --recall "$r" --stats -k 10 -i q.bin -o /dev/null ivf.tqi 2>&1 |
		    "$PY" -c 'import json,sys; s=json.load(sys.stdin); print(s["rows_scanned"] * 4 + s["refined"] * 32 + s["originals_read"] * 768)')
		[ "$cost" -ge "$prev" ] || { echo "--recall $r: $cost < $prev" >&2; false; }
		prev=$cost
	done
}

@test "--recall: errors" {
	"$TQ_BIN/tq-build" -q q.tq --no-calibrate -o nocal.tqi c.bin
	run --separate-stderr "$TQ_BIN/tq-search" --recall 0.9 -i q.bin nocal.tqi
	assert_fail1 tq-search
	assert_equal "$stderr" "tq-search: nocal.tqi: no calibration for --recall: make one with tq-build --recalibrate (it needs originals)"
	run --separate-stderr "$TQ_BIN/tq-search" --recall 0.9 --probes 2 -i q.bin ivf.tqi
	assert_usage_error tq-search
	run --separate-stderr "$TQ_BIN/tq-search" --recall 0 -i q.bin ivf.tqi
	assert_usage_error tq-search
	run --separate-stderr "$TQ_BIN/tq-search" --recall 1.5 -i q.bin ivf.tqi
	assert_usage_error tq-search
	run --separate-stderr "$TQ_BIN/tq-search" --recall 0.9 --radius 3 -i q.bin ivf.tqi
	assert_usage_error tq-search
	# A target no setting reaches: the best one, and a warning.
	"$TQ_BIN/tq-build" -q q.tq --originals none -o none.tqi c.bin
	run "$TQ_BIN/tq-inspect" none.tqi
	[[ "$output" != *calibration* ]]
	run --separate-stderr "$TQ_BIN/tq-build" --recalibrate none.tqi
	assert_fail1 tq-build
	assert_equal "$stderr" "tq-build: none.tqi: calibration needs originals, and the index has none"
}

@test "--recall 1 on an index that cannot reach it warns and uses its best" {
	run --separate-stderr "$TQ_BIN/tq-search" --recall 1 --stats -k 10 -i q.bin -o /dev/null ivf.tqi
	assert_status 0
	if [[ "$stderr" == *'"recall_reached":false'* ]]; then
		[[ "${stderr_lines[0]}" == "tq-search: warning: ivf.tqi: --recall 1: the calibration reaches recall@10 "*" at most; searching with that setting" ]] || { show; false; }
	else
		[ "${#stderr_lines[@]}" = 1 ]
	fi
}

@test "--recall past the grid's probes: unstructured rows reach through all lists" {
	# Random rows by inner product over 100 lists: 64 probes, where the
	# grid used to end, and 96 stay short of 0.995 at every oversample.
	# The grid now goes on to all lists as a last resort, so the target
	# is reached, with more probes than 64, and delivered.
	local got p
	mkdir -p unstructured && cd unstructured
	mkfix u.bin 32 5200 3
	"$TQ_BIN/tq-cat" --rows :5000 -o c.bin u.bin
	"$TQ_BIN/tq-cat" --rows 5000: -o q.bin u.bin
	"$TQ_BIN/tq-fit" -b 2 -m ip -i c.bin --lists 100 -o q.tq
	"$TQ_BIN/tq-build" -q q.tq -o u.tqi c.bin
	"$TQ_BIN/tq-recall" --truth -m ip -k 10 -o truth.ivecs c.bin q.bin
	run "$TQ_BIN/tq-inspect" --calibration u.tqi
	assert_status 0
	[[ "$output" == *$'\n''    10     100         16 '* ]] || { show; false; }
	# The re-rank goes on to 32 (320 candidates at k 10), not at k 100.
	[[ "$output" == *$'\n''    10     100         32 '* ]] || { show; false; }
	[[ "$output" != *$'\n''   100     100          4 '* ]] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-search" --recall 0.995 --stats -k 10 --format ivecs -i q.bin -o res.ivecs u.tqi
	assert_status 0
	[[ "$stderr" == *'"recall_reached":true,'* ]] || { show; false; }
	p=$(printf '%s' "$stderr" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["probes"])')
	[ "$p" -gt 64 ] && [ "$p" -le 100 ]
	got=$("$TQ_BIN/tq-recall" --json res.ivecs truth.ivecs |
	    "$PY" -c 'import json,sys; print(json.load(sys.stdin)["recall_at_10"])')
	"$PY" -c "import sys; sys.exit(not $got >= 0.985)" || { echo "recall@10 $got" >&2; false; }
}

@test "appends past 10% make the calibration stale; --recalibrate makes it fresh" {
	cp flat.tqi st.tqi
	"$TQ_BIN/tq-build" --append st.tqi more.bin   # 100 rows: 3.3%
	run --separate-stderr "$TQ_BIN/tq-search" --recall 0.9 -i q.bin -o /dev/null st.tqi
	assert_status 0
	assert_equal "$stderr" ""
	"$TQ_BIN/tq-build" --append st.tqi c.bin      # 3000 more
	run --separate-stderr "$TQ_BIN/tq-search" --recall 0.9 --stats -i q.bin -o /dev/null st.tqi
	assert_status 0
	assert_equal "${stderr_lines[0]}" "tq-search: warning: st.tqi: the calibration was made at 3000 live rows, the index has 6100 now: recalibrate with tq-build --recalibrate"
	[[ "${stderr_lines[1]}" == *'"calibration_stale":true'* ]] || { show; false; }
	run "$TQ_BIN/tq-inspect" st.tqi
	[[ "$output" == *"at 3000 live rows"*", stale: recalibrate"* ]] || { show; false; }
	"$TQ_BIN/tq-build" --recalibrate st.tqi
	run --separate-stderr "$TQ_BIN/tq-search" --recall 0.9 -i q.bin -o /dev/null st.tqi
	assert_equal "$stderr" ""
	run "$TQ_BIN/tq-inspect" st.tqi
	[[ "$output" == *"at 6100 live rows"* && "$output" != *stale* ]] || { show; false; }
	"$TQ_BIN/tq-inspect" --verify st.tqi >/dev/null
}

@test "a compaction is calibrated as a fresh build of its rows, byte for byte" {
	"$TQ_BIN/tq-cat" -o c31.bin c.bin more.bin
	"$TQ_BIN/tq-build" -q ivf.tq --calibrate-sample 500 -o fresh.tqi c31.bin
	cp ivf.tqi grown.tqi
	"$TQ_BIN/tq-build" --append grown.tqi more.bin
	"$TQ_BIN/tq-build" --compact --calibrate-sample 500 grown.tqi
	cmp fresh.tqi grown.tqi
	run "$TQ_BIN/tq-inspect" grown.tqi
	[[ "$output" == *"at 3100 live rows"* ]] || { show; false; }
	# Unasked, the same: a compaction calibrates as a build does.
	cp ivf.tqi grown2.tqi
	"$TQ_BIN/tq-build" --append grown2.tqi more.bin
	"$TQ_BIN/tq-build" --compact grown2.tqi
	cmp fresh.tqi grown2.tqi
}

@test "--calibrate takes the user's queries; --recalibrate -o writes elsewhere" {
	"$TQ_BIN/tq-build" -q q.tq --calibrate q.bin -o uq.tqi c.bin
	run "$TQ_BIN/tq-inspect" uq.tqi
	[[ "$output" == *"calibration 200 queries (given) at 3000 live rows"* ]] || { show; false; }
	"$TQ_BIN/tq-build" --recalibrate --calibrate-sample 100 -o re.tqi uq.tqi
	run "$TQ_BIN/tq-inspect" re.tqi
	[[ "$output" == *"calibration 100 queries (rows of the index)"* ]] || { show; false; }
	# The source is unchanged.
	run "$TQ_BIN/tq-inspect" uq.tqi
	[[ "$output" == *"200 queries (given)"* ]]
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq --calibrate more.bin --no-calibrate -o x.tqi c.bin
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" --append --no-calibrate uq.tqi more.bin
	assert_usage_error tq-build
	mkfix small.bin 16 50 3
	"$TQ_BIN/tq-build" -q q.tq -o small.tqi small.bin
	run "$TQ_BIN/tq-inspect" small.tqi
	[[ "$output" != *calibration* ]]
	run --separate-stderr "$TQ_BIN/tq-build" --recalibrate small.tqi
	assert_fail1 tq-build
	assert_equal "$stderr" "tq-build: small.tqi: 50 live rows, too few to calibrate from (at least 100)"
}

@test "tq-recall --recall reports delivered recall against each target" {
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus c.bin --queries q.bin -b 2 -k 10 --lists 16 --recall 0.8,0.95 --threads 1 --json
	assert_status 0
	printf '%s' "$output" | "$PY" -c '
import json, sys
r = json.load(sys.stdin)
assert [x["recall_target"] for x in r["runs"]] == [0.8, 0.95], r
for x in r["runs"]:
    d = x["recall_at_10"] - x["recall_target"]
    assert abs(x["delivered_minus_target"] - d) < 1e-3, x
    assert d >= -0.02, x
'
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus c.bin --queries q.bin -k 5 --recall 0.9
	assert_usage_error tq-recall
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus c.bin --queries q.bin -k 10 --recall 0.9 --oversample 2
	assert_usage_error tq-recall
}
