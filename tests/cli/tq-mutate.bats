#!/usr/bin/env bats
# tq-build --append/--delete/--compact and tq-search --allow/--radius.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 16 1000 21 --clusters 10
	tq head "$F/c.bin" "$F/a.bin" 700
	tq rows "$F/c.bin" "$F/b.bin" "$(seq -s, 700 999)"
	tq rows "$F/c.bin" "$F/q.bin" 3,250,512,900
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o "$F/q.tqq"
	"$TQ_BIN/tq-build" -q "$F/q.tqq" -o "$F/u.tqi" "$F/c.bin"
	"$TQ_BIN/tq-build" -q "$F/q.tqq" -o "$F/a.tqi" "$F/a.bin"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
}

@test "tq-build --append: equals a fresh build of the union with the same quantizer" {
	cp "$F/a.tqi" a.tqi
	run --separate-stderr "$TQ_BIN/tq-build" --append a.tqi "$F/b.bin"
	assert_status 0
	assert_equal "$output$stderr" ""
	# A second segment, searched as the union; compacted, the union.
	"$TQ_BIN/tq-inspect" a.tqi | grep -qx 'segments 2'
	"$TQ_BIN/tq-search" -k 10 --oversample 2 -i "$F/q.bin" a.tqi >a.tsv
	"$TQ_BIN/tq-search" -k 10 --oversample 2 -i "$F/q.bin" "$F/u.tqi" >u.tsv
	cmp a.tsv u.tsv
	rm a.tsv u.tsv
	"$TQ_BIN/tq-build" --compact -o c.tqi a.tqi
	cmp c.tqi "$F/u.tqi"
	rm c.tqi
	assert_only_files . a.tqi
	# -o writes elsewhere and leaves the index alone; stdin works too.
	cp "$F/a.tqi" a.tqi
	"$TQ_BIN/tq-build" --append --threads 1 -o b.tqi a.tqi - <"$F/b.bin"
	cmp a.tqi "$F/a.tqi"
	cmp b.tqi "$F/u.tqi"
}

@test "tq-build --append: new ids continue after the largest, or come from --ids" {
	seq 100 799 >a.ids
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --ids a.ids -o a.tqi "$F/a.bin"
	"$TQ_BIN/tq-build" --append -o b.tqi a.tqi "$F/b.bin"
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 --oversample 10 -i "$F/q.bin" b.tqi
	# Row 900 of the corpus is row 200 of b.bin: id 800 + 200.
	assert_equal "$(cut -f3 <<<"$output" | tr '\n' ' ')" "103 350 612 1000 "
	seq 5000 5299 >b.ids
	"$TQ_BIN/tq-build" --append --ids b.ids -o c.tqi a.tqi "$F/b.bin"
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 --oversample 10 -i "$F/q.bin" c.tqi
	assert_equal "$(cut -f3 <<<"$output" | tr '\n' ' ')" "103 350 612 5200 "
	seq 1 5 >few.ids
	run --separate-stderr "$TQ_BIN/tq-build" --append --ids few.ids a.tqi "$F/b.bin"
	assert_fail1 tq-build few.ids "5 ids for 300 rows"
}

@test "tq-build --append: NaN in the new corpus leaves the index byte-identical, no temporaries" {
	cp "$F/a.tqi" a.tqi
	tq rows "$F/b.bin" bad.bin 0,1,2
	$PY - bad.bin <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[8 + 4 * 20:8 + 4 * 21] = struct.pack("<f", float("nan"))
open(p, "wb").write(b)
PY
	run --separate-stderr "$TQ_BIN/tq-build" --append a.tqi bad.bin
	assert_fail1 tq-build bad.bin "NaN"
	cmp a.tqi "$F/a.tqi"
	assert_only_files . a.tqi bad.bin
	# Another dimension, a corrupt index: refused the same way.
	mkfix d8.bin 8 10
	run --separate-stderr "$TQ_BIN/tq-build" --append a.tqi d8.bin
	assert_fail1 tq-build "dimension 8 does not match the index (16)"
	cp a.tqi bad.tqi
	tq flip bad.tqi $(($(tq sections bad.tqi | awk '$1 == "CODE" { print $2 }') + 5))
	# An append reads none of the old rows: the damage stays, for
	# --verify to name; a rewrite (-o, --compact) refuses to copy it.
	run --separate-stderr "$TQ_BIN/tq-build" --append -o x.tqi bad.tqi "$F/b.bin"
	assert_fail1 tq-build bad.tqi "section CODE: checksum"
	[ ! -e x.tqi ]
	"$TQ_BIN/tq-build" --append bad.tqi "$F/b.bin"
	run --separate-stderr "$TQ_BIN/tq-inspect" --verify bad.tqi
	assert_fail1 tq-inspect bad.tqi "section CODE: checksum"
	cmp a.tqi "$F/a.tqi"
	assert_only_files . a.tqi bad.bin d8.bin bad.tqi
}

@test "tq-build --delete: deleted ids are never returned; -v counts them" {
	cp "$F/u.tqi" u.tqi
	printf '3\n250\n250\n512\n123456\n' >del.ids
	run --separate-stderr "$TQ_BIN/tq-build" --delete del.ids u.tqi
	assert_status 0
	assert_equal "$output$stderr" ""
	"$TQ_BIN/tq-inspect" --verify u.tqi >/dev/null
	"$TQ_BIN/tq-inspect" u.tqi | grep -q '^  TOMB  .*length 125 '
	"$TQ_BIN/tq-inspect" u.tqi | grep -qx 'live 997'
	"$TQ_BIN/tq-inspect" --json u.tqi | grep -q '"vectors":1000,.*"live":997'
	run --separate-stderr "$TQ_BIN/tq-search" -k 997 --oversample 2 -i "$F/q.bin" u.tqi
	assert_status 0
	! cut -f3 <<<"$output" | grep -qx -e 3 -e 250 -e 512
	# Every live id is still there.
	assert_equal "$(awk -F'\t' '$1 == 0 { print $3 }' <<<"$output" | sort -n | uniq | wc -l)" 997
	run --separate-stderr "$TQ_BIN/tq-search" -k 998 -i "$F/q.bin" u.tqi
	assert_fail1 tq-search "k (998) exceeds the 997 vectors in the index"
	# Again: nothing new; -v says so.
	run --separate-stderr "$TQ_BIN/tq-build" --delete del.ids -v u.tqi
	assert_status 0
	case "$stderr" in *"0 deleted, 1000 vectors (997 live)"*) ;; *) show; false ;; esac
	assert_only_files . u.tqi del.ids
}

@test "tq-build --delete: every vector: exit 1, the index unchanged" {
	cp "$F/a.tqi" a.tqi
	seq 0 699 >all.ids
	run --separate-stderr "$TQ_BIN/tq-build" --delete all.ids a.tqi
	assert_fail1 tq-build a.tqi "would delete every vector"
	cmp a.tqi "$F/a.tqi"
	assert_only_files . a.tqi all.ids
	printf 'x\n' >bad.ids
	run --separate-stderr "$TQ_BIN/tq-build" --delete bad.ids a.tqi
	assert_fail1 tq-build bad.ids
}

@test "tq-build --compact and --append after --delete equal fresh builds" {
	cp "$F/a.tqi" a.tqi
	printf '0\n31\n32\n699\n' >del.ids
	"$TQ_BIN/tq-build" --delete del.ids a.tqi
	tq rows "$F/a.bin" kept.bin "$(seq -s, 1 30),$(seq -s, 33 698)"
	{ seq 1 30; seq 33 698; } >kept.ids
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --ids kept.ids -o want.tqi kept.bin
	"$TQ_BIN/tq-build" --compact -o c.tqi a.tqi
	cmp c.tqi want.tqi
	tq rows "$F/c.bin" kb.bin "$(seq -s, 1 30),$(seq -s, 33 698),$(seq -s, 700 999)"
	{ cat kept.ids; seq 700 999; } >kb.ids
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --ids kb.ids -o want2.tqi kb.bin
	"$TQ_BIN/tq-build" --append a.tqi "$F/b.bin"
	"$TQ_BIN/tq-build" --compact a.tqi
	cmp a.tqi want2.tqi
}

@test "ids: 4 bytes (ID32) while every id of a segment fits, else 8 (IDS); the same results" {
	seq 100 799 >a.ids
	seq 4294967000 4294967699 >w.ids	# past 2^32 - 1 from row 296 on
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --ids a.ids -o a.tqi "$F/a.bin"
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --ids w.ids -o w.tqi "$F/a.bin"
	"$TQ_BIN/tq-inspect" a.tqi | grep -q '^  ID32 .* length 2800 '
	"$TQ_BIN/tq-inspect" w.tqi | grep -q '^  IDS  .* length 5600 '
	! "$TQ_BIN/tq-inspect" w.tqi | grep -q ID32
	# Four bytes a vector fewer, and the same rows found.
	bpv() { "$TQ_BIN/tq-inspect" --json "$1" | "$PY" -c \
	    'import json,sys; print(json.load(sys.stdin)["bytes_per_vector"])'; }
	"$PY" -c "assert abs($(bpv w.tqi) - $(bpv a.tqi) - 4) < 0.01"
	"$TQ_BIN/tq-search" -k 5 -i "$F/q.bin" a.tqi | cut -f1,2,4 >a.rows
	"$TQ_BIN/tq-search" -k 5 -i "$F/q.bin" w.tqi | cut -f1,2,4 >w.rows
	cmp a.rows w.rows
	"$TQ_BIN/tq-search" -k 1 --oversample 10 -i "$F/q.bin" w.tqi >w.tsv
	assert_equal "$(head -3 w.tsv | cut -f3 | tr '\n' ' ')" \
	    "4294967003 4294967250 4294967512 "
	# Segments choose alone: wide ids appended to a narrow index.
	seq 5000000000 5000000299 >b.ids
	cp a.tqi ab.tqi
	"$TQ_BIN/tq-build" --append --ids b.ids ab.tqi "$F/b.bin"
	"$TQ_BIN/tq-inspect" ab.tqi | grep -q 'ID32 .* segment 0'
	"$TQ_BIN/tq-inspect" ab.tqi | grep -q 'IDS  .* segment 1'
	"$TQ_BIN/tq-search" -k 1 --oversample 10 -i "$F/q.bin" ab.tqi >ab.tsv
	assert_equal "$(cut -f3 ab.tsv | tr '\n' ' ')" "103 350 612 5000000200 "
	# A compaction chooses by the live rows, as a fresh build would.
	"$TQ_BIN/tq-build" --compact -o c.tqi ab.tqi
	"$TQ_BIN/tq-inspect" c.tqi | grep -q '^  IDS '
	"$TQ_BIN/tq-build" --delete b.ids -o d.tqi ab.tqi
	"$TQ_BIN/tq-build" --compact -o dc.tqi d.tqi
	cmp dc.tqi a.tqi
	# Deleting by a wide id, and an allow-list of them.
	printf '4294967512\n' >one.ids
	"$TQ_BIN/tq-build" --delete one.ids -o wd.tqi w.tqi
	"$TQ_BIN/tq-search" -k 1 --oversample 10 -i "$F/q.bin" wd.tqi >wd.tsv
	[ "$(sed -n 3p wd.tsv | cut -f3)" != 4294967512 ]
	"$TQ_BIN/tq-search" -k 1 --allow one.ids -i "$F/q.bin" w.tqi >al.tsv
	assert_equal "$(cut -f3 al.tsv | sort -u)" "4294967512"
}

@test "tq-search --allow: only allowed ids; fewer than k listed in tsv/json, -1 in ivecs" {
	printf '5\n17\n900\n77777\n' >allow.ids
	run --separate-stderr "$TQ_BIN/tq-search" -k 10 --allow allow.ids -i "$F/q.bin" "$F/u.tqi"
	assert_status 0
	assert_equal "$(wc -l <<<"$output")" 12
	assert_equal "$(cut -f3 <<<"$output" | sort -n | uniq | tr '\n' ' ')" "5 17 900 "
	run --separate-stderr "$TQ_BIN/tq-search" -k 10 --allow allow.ids --format json -i "$F/q.bin" "$F/u.tqi"
	tq jsoncheck <(printf '%s\n' "$output") 4 3
	"$TQ_BIN/tq-search" -k 5 --allow allow.ids --format ivecs -i "$F/q.bin" -o r.ivecs "$F/u.tqi"
	assert_equal "$(stat -c %s r.ivecs)" $((4 * 6 * 4))
	assert_equal "$(od -An -td4 -w24 r.ivecs | awk '{ print $1, $5, $6 }' | sort -u)" "5 -1 -1"
	# The filter equals brute force over the allowed subset.
	seq 0 2 999 >even.ids
	"$TQ_BIN/tq-search" -k 10 --oversample 100 --allow even.ids -i "$F/q.bin" -o got.tsv "$F/u.tqi"
	"$TQ_BIN/tq-search" -k 100 --oversample 10 -i "$F/q.bin" "$F/u.tqi" |
	    awk -F'\t' '$3 % 2 == 0 { if (++n[$1] <= 10) print $1 "\t" n[$1] "\t" $3 "\t" $4 }' >want.tsv
	cmp got.tsv want.tsv
	# A .u64 file works the same.
	$PY -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<4Q", 5, 17, 900, 77777))' >allow.u64
	run --separate-stderr "$TQ_BIN/tq-search" -k 10 --allow allow.u64 -i "$F/q.bin" "$F/u.tqi"
	assert_equal "$(cut -f3 <<<"$output" | sort -n | uniq | tr '\n' ' ')" "5 17 900 "
	run --separate-stderr "$TQ_BIN/tq-search" --allow missing.ids -i "$F/q.bin" "$F/u.tqi"
	assert_fail1 tq-search missing.ids
}

@test "tq-search --radius: every vector within r, best first; -k caps" {
	"$TQ_BIN/tq-search" -k 11 --oversample 100 -i "$F/q.bin" -o top.tsv "$F/u.tqi"
	for qi in 0 1 2 3; do
		r=$(awk -F'\t' -v q=$qi '$1 == q && $2 >= 10 { s[$2] = $4 } END { printf "%.6f", (s[10] + s[11]) / 2 }' top.tsv)
		"$TQ_BIN/tq-search" --radius "$r" -i "$F/q.bin" -o rr.tsv "$F/u.tqi"
		assert_equal "$(awk -F'\t' -v q=$qi '$1 == q { print $3 }' rr.tsv | tr '\n' ' ')" \
		    "$(awk -F'\t' -v q=$qi '$1 == q && $2 <= 10 { print $3 }' top.tsv | tr '\n' ' ')"
	done
	# Sorted ascending for l2; -k keeps the best.
	run --separate-stderr "$TQ_BIN/tq-search" --radius 1e30 -k 3 -i "$F/q.bin" "$F/u.tqi"
	assert_equal "$(wc -l <<<"$output")" 12
	"$TQ_BIN/tq-search" --radius 1e30 -i "$F/q.bin" -o all.tsv "$F/u.tqi"
	assert_equal "$(wc -l <all.tsv)" 4000
	awk -F'\t' '$2 > 1 && $4 < prev { exit 1 } { prev = $4 }' all.tsv
	# No result: nothing in tsv, an empty row in ivecs.
	run --separate-stderr "$TQ_BIN/tq-search" --radius 0.000001 -i "$F/q.bin" "$F/u.tqi"
	assert_status 0
	# Radius 0: the exact copies of queries 0-2 only (row 900 is not in a).
	"$TQ_BIN/tq-search" --radius 0 --format ivecs -i "$F/q.bin" -o z.ivecs "$F/a.tqi"
	assert_equal "$(od -An -td4 -v z.ivecs | tr -s ' \n' ' ')" " 1 3 1 250 1 512 0 "
	run --separate-stderr "$TQ_BIN/tq-search" --radius abc "$F/u.tqi"
	assert_usage_error tq-search
}

@test "tq-search --radius: ip accepts a negative radius" {
	"$TQ_BIN/tq-build" -m ip -o ip.tqi "$F/c.bin"
	"$TQ_BIN/tq-search" --radius -1e30 -i "$F/q.bin" -o all.tsv ip.tqi
	assert_equal "$(wc -l <all.tsv)" 4000
	awk -F'\t' '$2 > 1 && $4 > prev { exit 1 } { prev = $4 }' all.tsv
}

@test "tq-build: mutation usage errors" {
	run --separate-stderr "$TQ_BIN/tq-build" --append -q "$F/q.tqq" "$F/a.tqi" "$F/b.bin"
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" --append --compact "$F/a.tqi"
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" --append "$F/a.tqi"
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" --compact "$F/a.tqi" extra
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" --delete x.ids
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" --compact --ids x.ids "$F/a.tqi"
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" --delete x.ids --originals none "$F/a.tqi"
	assert_usage_error tq-build
}

@test "tq-build: flat append and compact of more than a chunk of rows equal fresh builds" {
	# 16-d rows go 4096 to a chunk: two whole chunks move by blocks.
	mkfix big.bin 16 10000 5 --clusters 10
	tq head big.bin old.bin 9000
	tq rows big.bin new.bin @<(seq 9000 9999)
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --originals f16 -o a.tqi old.bin
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --originals f16 -o want0.tqi big.bin
	"$TQ_BIN/tq-build" --append -o a0.tqi a.tqi new.bin
	cmp a0.tqi want0.tqi
	{ echo 0; seq 31 33; seq 1000 1999; seq 4001 7 8000; echo 8999; } >del.ids
	"$TQ_BIN/tq-build" --delete del.ids a.tqi
	kept_ids 9000 del.ids >kept.ids
	tq rows old.bin kept.bin @kept.ids
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --originals f16 --ids kept.ids -o want.tqi kept.bin
	"$TQ_BIN/tq-build" --compact -o c.tqi a.tqi
	cmp c.tqi want.tqi
	{ cat kept.ids; seq 9000 9999; } >all.ids
	tq rows big.bin all.bin @all.ids
	"$TQ_BIN/tq-build" -q "$F/q.tqq" --originals f16 --ids all.ids -o want2.tqi all.bin
	"$TQ_BIN/tq-build" --append a.tqi new.bin
	"$TQ_BIN/tq-build" --compact a.tqi
	cmp a.tqi want2.tqi
}
