#!/usr/bin/env bats
# tq-recall: compare mode (golden values), --truth (against a brute force
# in Python), evaluation mode.

load helpers

setup() {
	cd_tmp
}

@test "tq-recall compare: hand-made ivecs, exact recall values" {
	# Query 0 all right; query 1: rank 1 wrong, 4 of 10 right.
	tq mkivecs truth.ivecs '0 1 2 3 4 5 6 7 8 9;10 11 12 13 14 15 16 17 18 19'
	tq mkivecs res.ivecs '0 1 2 3 4 5 6 7 8 9;99 11 12 13 14 90 91 92 93 94'
	run --separate-stderr "$TQ_BIN/tq-recall" res.ivecs truth.ivecs
	assert_status 0
	assert_equal "$stderr" ""
	assert_equal "$output" "$(printf 'recall@1 0.5000\nrecall@10 0.7000')"
}

@test "tq-recall compare: order within the top 10 does not matter for recall@10" {
	tq mkivecs truth.ivecs '0 1 2 3 4 5 6 7 8 9'
	tq mkivecs res.ivecs '9 8 7 6 5 4 3 2 1 0'
	run --separate-stderr "$TQ_BIN/tq-recall" res.ivecs truth.ivecs
	assert_status 0
	assert_equal "$output" "$(printf 'recall@1 0.0000\nrecall@10 1.0000')"
}

@test "tq-recall compare: cutoffs 1, 10, 100 up to the narrower width" {
	"$PY" - <<'EOF'
import struct
def w(path, rows):
    with open(path, "wb") as f:
        for r in rows:
            f.write(struct.pack("<i%di" % len(r), len(r), *r))
t = [list(range(100)), list(range(100, 200)), list(range(200, 300)), list(range(300, 400))]
# q0 exact; q1 half of the top 100 (ranks 1..50 right); q2 ranks 1..10
# right, nothing after; q3 nothing right.
r = [list(range(100)),
     list(range(100, 150)) + list(range(1000, 1050)),
     list(range(200, 210)) + list(range(2000, 2090)),
     list(range(5000, 5100))]
w("t100.ivecs", t)
w("r100.ivecs", r)
w("r10.ivecs", [x[:10] for x in r])
w("r5.ivecs", [x[:5] for x in r])
EOF
	# recall@1 = 3/4; @10 = 3/4; @100 = (100+50+10+0)/400 = 0.4.
	run --separate-stderr "$TQ_BIN/tq-recall" r100.ivecs t100.ivecs
	assert_status 0
	assert_equal "$output" "$(printf 'recall@1 0.7500\nrecall@10 0.7500\nrecall@100 0.4000')"
	run --separate-stderr "$TQ_BIN/tq-recall" r10.ivecs t100.ivecs
	assert_status 0
	assert_equal "$output" "$(printf 'recall@1 0.7500\nrecall@10 0.7500')"
	run --separate-stderr "$TQ_BIN/tq-recall" r5.ivecs t100.ivecs
	assert_status 0
	assert_equal "$output" "recall@1 0.7500"
}

@test "tq-recall compare --json parses" {
	tq mkivecs truth.ivecs '0 1 2 3 4 5 6 7 8 9;10 11 12 13 14 15 16 17 18 19'
	tq mkivecs res.ivecs '0 1 2 3 4 5 6 7 8 9;99 11 12 13 14 90 91 92 93 94'
	run --separate-stderr "$TQ_BIN/tq-recall" --json res.ivecs truth.ivecs
	assert_status 0
	"$PY" -c 'import json,sys; o = json.loads(sys.argv[1]); print(o)' "$output"
	# The values appear in it.
	[[ "$output" == *0.5* && "$output" == *0.7* ]] || { show; false; }
}

@test "tq-recall compare: different row counts: exit 1" {
	tq mkivecs truth.ivecs '0 1 2;3 4 5'
	tq mkivecs res.ivecs '0 1 2'
	run --separate-stderr "$TQ_BIN/tq-recall" res.ivecs truth.ivecs
	assert_fail1 tq-recall
}

@test "tq-recall compare: malformed ivecs: exit 1 naming the file" {
	tq mkivecs truth.ivecs '0 1 2;3 4 5'
	head -c 10 truth.ivecs >cut.ivecs
	run --separate-stderr "$TQ_BIN/tq-recall" cut.ivecs truth.ivecs
	assert_fail1 tq-recall cut.ivecs
	: >empty.ivecs
	run --separate-stderr "$TQ_BIN/tq-recall" truth.ivecs empty.ivecs
	assert_fail1 tq-recall empty.ivecs
}

@test "tq-recall --truth equals a brute force in Python (l2, ip, cosine)" {
	mkfix c.bin 12 120 81
	mkfix q.bin 12 6 82
	for m in l2 ip cosine; do
		tq truth c.bin q.bin 8 $m want-$m.ivecs
		run --separate-stderr "$TQ_BIN/tq-recall" --truth -k 8 -m $m -o got-$m.ivecs c.bin q.bin
		assert_status 0
		assert_equal "$output" ""
		cmp got-$m.ivecs want-$m.ivecs
	done
	# The default metric is l2.
	"$TQ_BIN/tq-recall" --truth -k 8 -o got.ivecs c.bin q.bin
	cmp got.ivecs want-l2.ivecs
}

@test "tq-recall --truth: default k is 100; --threads does not change it" {
	mkfix c.bin 8 150 83
	mkfix q.bin 8 3 84
	"$TQ_BIN/tq-recall" --truth -o t.ivecs c.bin q.bin
	tq ivecscheck t.ivecs 3 100
	"$TQ_BIN/tq-recall" --truth --threads 1 -o t1.ivecs c.bin q.bin
	"$TQ_BIN/tq-recall" --truth --threads 2 -o t2.ivecs c.bin q.bin
	cmp t.ivecs t1.ivecs
	cmp t.ivecs t2.ivecs
}

@test "tq-recall --truth golden: fixtures/small.truth.ivecs" {
	"$TQ_BIN/tq-recall" --truth -k 10 -o got.ivecs "$FIXTURES/small.bin" "$FIXTURES/small.queries.bin"
	cmp got.ivecs "$FIXTURES/small.truth.ivecs"
}

@test "tq-recall --truth: corpus and queries of other dims: exit 1" {
	mkfix c.bin 8 50 1
	mkfix q.bin 9 3 2
	run --separate-stderr "$TQ_BIN/tq-recall" --truth -k 5 -o t.ivecs c.bin q.bin
	assert_fail1 tq-recall
	assert_only_files . c.bin q.bin
}

@test "tq-recall --truth: NaN in the corpus: exit 1 naming it, no output" {
	mkfix c.bin 8 50 1 --nan 20
	mkfix q.bin 8 3 2
	run --separate-stderr "$TQ_BIN/tq-recall" --truth -k 5 -o t.ivecs c.bin q.bin
	assert_fail1 tq-recall c.bin
	assert_only_files . c.bin q.bin
}

@test "tq-recall evaluation: --corpus/--queries prints recall for each oversample" {
	mkfix c.bin 32 600 91 --clusters 8
	tq rows c.bin qs.bin 1,50,100,150,200,250,300,350,400,450
	tq perturb qs.bin q.bin 3 0.2
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus c.bin --queries q.bin -b 4 -m l2 -k 10 --oversample 1,4 --threads 2
	assert_status 0
	[[ "$output" == *recall@10* ]] || { show; false; }
	[[ "$output" == *recall@1* ]] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-recall" --json --corpus c.bin --queries q.bin -k 10 --oversample 1,4 --queries-limit 5
	assert_status 0
	"$PY" -c 'import json,sys; json.loads(sys.argv[1])' "$output"
	# The recall with re-rank is perfect here (the truth is exact).
	run --separate-stderr "$TQ_BIN/tq-recall" --json --corpus c.bin --queries q.bin -k 10 --oversample 60
	assert_status 0
	"$PY" -c '
import json, sys
o = json.loads(sys.argv[1])
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            if k in ("recall@10", "recall_at_10", "recall_10", "recall10"):
                yield x
            yield from walk(x)
    elif isinstance(v, list):
        for x in v:
            yield from walk(x)
vals = list(walk(o))
assert vals, "no recall@10 in %r" % o
assert all(abs(v - 1.0) < 1e-9 for v in vals), vals' "$output"
}

@test "tq-recall evaluation: --oversample auto runs the error-bounded re-rank and counts its reads" {
	mkfix c.bin 32 600 91 --clusters 8
	tq rows c.bin qs.bin 1,50,100,150,200,250,300,350,400,450
	tq perturb qs.bin q.bin 3 0.2
	run --separate-stderr "$TQ_BIN/tq-recall" --json --corpus c.bin --queries q.bin -k 10 --oversample 1,auto,auto:1.5,4,auto-set --threads 1
	assert_status 0
	"$PY" -c '
import json, sys
o = json.loads(sys.argv[1])
r = o["runs"]
assert [x["oversample"] for x in r] == [1, "auto", "auto", 4, "auto-set"], r
assert "auto_z" not in r[0] and "auto_z" not in r[3], r
assert r[1]["auto_z"] == 2 and r[2]["auto_z"] == 1.5, r
# auto-set: the same set as auto, its settled results left unread; auto
# reads them, so its recall@1 is that of a re-rank.
assert r[4]["auto_z"] == 2, r
assert r[4]["recall_at_10"] == r[1]["recall_at_10"], r
assert r[4]["originals_read_per_query"] <= r[1]["originals_read_per_query"], r
assert r[1]["recall_at_1"] >= r[4]["recall_at_1"], r
assert r[1]["recall_at_1"] >= r[3]["recall_at_1"] - 0.1, r
# No re-rank reads nothing, a fixed factor f reads k * f, auto between.
assert r[0]["originals_read_per_query"] == 0, r
assert r[3]["originals_read_per_query"] == 40, r
for x in r[1:3]:
    assert 0 < x["originals_read_per_query"] <= 160, x
    assert x["recall_at_10"] >= r[0]["recall_at_10"], r
# z = 1.5 narrows the intervals: it reads no more than z = 2.
assert r[2]["originals_read_per_query"] <= r[1]["originals_read_per_query"], r
# Passes again: a share for auto, no field for fixed settings.
assert "widened_per_query" not in r[0] and "widened_per_query" not in r[3], r
assert all(0 <= x["widened_per_query"] <= 4 for x in r[1:3]), r' "$output"
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus c.bin --queries q.bin -k 10 --sweep oversample=auto:1.5 --threads 1
	assert_status 0
	[[ "$output" == *" reads "* ]] || { show; false; }
	[[ "$output" == *"  auto:1.5  "* ]] || { show; false; }
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus c.bin --queries q.bin -k 10 --oversample auto-set:3 --threads 1
	assert_status 0
	[[ "$output" == *$'\n'"auto-set:3 "* ]] || { show; false; }
}

@test "tq-recall evaluation: a missing corpus: exit 1 naming it" {
	mkfix q.bin 8 3 2
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus nonexistent.bin --queries q.bin
	assert_fail1 tq-recall nonexistent.bin
}
