#!/usr/bin/env bats
# Commits of index format 2 (issue #15): overlapping writers serialise,
# readers never see a partial state, a retried append is refused or (with
# --replace) converges, and a writer killed at any point leaves the old
# commit or the new one.

load helpers

# 100 kills; 25 under the sanitizers, whose programs run several times
# slower (CI's time limit; the plain run covers the points densely, and
# TQ_COMMIT_KILLS=1000 runs a longer search by hand).
if sanitized; then
	KILLS=${TQ_COMMIT_KILLS:-25}
else
	KILLS=${TQ_COMMIT_KILLS:-100}
fi

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/base.bin" 16 2000 41 --clusters 6
	mkfix "$F/q.bin" 16 8 42
	for i in 0 1 2 3 4 5 6 7; do
		mkfix "$F/b$i.bin" 16 100 $((50 + i)) --clusters 6
		seq $((10000 + 100 * i)) $((10099 + 100 * i)) >"$F/b$i.ids"
	done
	"$TQ_BIN/tq-fit" -i "$F/base.bin" -o "$F/flat.tqq"
	"$TQ_BIN/tq-fit" -i "$F/base.bin" --lists 8 -o "$F/ivf.tqq"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
}

# "--probes 1000" for an index with lists: every list.
all_lists() {
	"$TQ_BIN/tq-inspect" "$1" | grep -q '^lists ' && echo --probes 1000
	true
}

# The ids a search can return, one per line, sorted: k = every live row.
live_ids() {
	local live
	live=$("$TQ_BIN/tq-inspect" --json "$1" | "$PY" -c \
	    'import json,sys; d=json.load(sys.stdin); print(d.get("live", d["vectors"]))')
	"$TQ_BIN/tq-search" -k "$live" $(all_lists "$1") -i "$F/q.bin" "$1" |
	    awk -F'\t' '$1 == 0 { print $3 }' | sort -n
}

@test "8 overlapping appends and 2 deletes with 4 search loops: every row once, every read complete" {
	"$TQ_BIN/tq-build" -q "$F/flat.tqq" -o idx.tqi "$F/base.bin"
	touch running
	for r in 1 2 3 4; do
		(
			n=0
			while [ -e running ]; do
				"$TQ_BIN/tq-search" -k 5 -i "$F/q.bin" idx.tqi >/dev/null ||
				    echo "reader $r failed" >>fails
				"$TQ_BIN/tq-inspect" --verify idx.tqi >/dev/null ||
				    echo "reader $r: verify failed" >>fails
				n=$((n + 1))
			done
			echo $n >reads.$r
		) &
	done
	pids=()
	for i in 0 1 2 3 4 5 6 7; do
		"$TQ_BIN/tq-build" --append --ids "$F/b$i.ids" idx.tqi "$F/b$i.bin" &
		pids+=($!)
	done
	seq 0 9 >d1.ids
	seq 10 19 >d2.ids
	"$TQ_BIN/tq-build" --delete d1.ids idx.tqi &
	pids+=($!)
	"$TQ_BIN/tq-build" --delete d2.ids idx.tqi &
	pids+=($!)
	for p in "${pids[@]}"; do
		wait "$p"
	done
	rm running
	wait
	[ ! -e fails ] || { cat fails >&2; false; }
	cat reads.* | awk '{ s += $1 } END { if (s < 4) exit 1 }'
	"$TQ_BIN/tq-inspect" --verify idx.tqi >/dev/null
	"$TQ_BIN/tq-inspect" idx.tqi | grep -qx 'vectors 2800'
	"$TQ_BIN/tq-inspect" idx.tqi | grep -qx 'live 2780'
	live_ids idx.tqi >got.ids
	{ seq 20 1999; cat "$F"/b?.ids; } | sort -n >want.ids
	cmp got.ids want.ids
	# The same index as the writers run one after another (compacted).
	"$TQ_BIN/tq-build" --compact -o c.tqi idx.tqi
	live_ids c.tqi | cmp - want.ids
}

@test "a retried append is refused and leaves the index byte-identical; --replace converges" {
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" -o idx.tqi "$F/base.bin"
	"$TQ_BIN/tq-build" --append --ids "$F/b0.ids" idx.tqi "$F/b0.bin"
	cp idx.tqi once.tqi
	run --separate-stderr "$TQ_BIN/tq-build" --append --ids "$F/b0.ids" idx.tqi "$F/b0.bin"
	assert_fail1 tq-build b0.ids "id 10000 (row 0 of the ids) is already in the index"
	cmp idx.tqi once.tqi
	"$TQ_BIN/tq-build" --append --replace --ids "$F/b0.ids" idx.tqi "$F/b0.bin"
	"$TQ_BIN/tq-inspect" idx.tqi | grep -qx 'live 2100'
	"$TQ_BIN/tq-search" -k 10 --oversample 2 -i "$F/q.bin" idx.tqi >a.tsv
	"$TQ_BIN/tq-search" -k 10 --oversample 2 -i "$F/q.bin" once.tqi >b.tsv
	cmp a.tsv b.tsv
	# Ids that repeat among the new rows: refused, naming both rows.
	{ seq 30000 30049; seq 30000 30049; } >rep.ids
	run --separate-stderr "$TQ_BIN/tq-build" --append --ids rep.ids idx.tqi "$F/b1.bin"
	assert_fail1 tq-build rep.ids "id 30000 repeats: rows 0 and 50 of the ids"
}

@test "an append writes its rows, not the index: bytes written and segments" {
	"$TQ_BIN/tq-build" -q "$F/flat.tqq" --originals f16 -o idx.tqi "$F/base.bin"
	local size0 size1 c0
	size0=$(stat -c %s idx.tqi)
	c0=$("$TQ_BIN/tq-inspect" idx.tqi | sed -n 's/^commit //p')
	"$TQ_BIN/tq-build" --append --ids "$F/b0.ids" idx.tqi "$F/b0.bin"
	size1=$(stat -c %s idx.tqi)
	# 100 rows of 16-d: codes, factors, ids, f16 originals, and a table.
	[ $((size1 - size0)) -lt $((100 * (8 + 12 + 8 + 32) + 8192)) ]
	"$TQ_BIN/tq-inspect" idx.tqi | grep -qx 'segments 2'
	# One commit more (a build with its calibration is commit 2).
	"$TQ_BIN/tq-inspect" idx.tqi | grep -qx "commit $((c0 + 1))"
	# Past --max-segments an append compacts: one segment again.
	"$TQ_BIN/tq-build" --append --max-segments 2 --ids "$F/b1.ids" idx.tqi "$F/b1.bin"
	"$TQ_BIN/tq-inspect" idx.tqi | grep -qx 'segments 1'
	"$TQ_BIN/tq-inspect" idx.tqi | grep -qx 'vectors 2200'
}

# state FILE: what a search sees (ids and scores) and the row counts.
state() {
	{
		"$TQ_BIN/tq-inspect" "$1" | grep -E '^(vectors|live) '
		"$TQ_BIN/tq-search" -k 20 $(all_lists "$1") -i "$F/q.bin" "$1"
	} | md5sum | cut -d' ' -f1
}

@test "SIGKILL at random points of appends, deletes and compactions: the old or the new commit" {
	local n=0 old=0 new=0 kind q op pid
	for kind in flat ivf; do
		"$TQ_BIN/tq-build" -q "$F/$kind.tqq" --originals f16 -o $kind.tqi "$F/base.bin"
	done
	RANDOM=7
	seq 100 140 >del.ids
	while [ $n -lt "$KILLS" ]; do
		kind=$([ $((RANDOM % 2)) = 0 ] && echo flat || echo ivf)
		op=$((RANDOM % 4))
		cp $kind.tqi want.tqi
		case $op in
		0|1) set -- --append "$F/b$((RANDOM % 8)).bin" ;;
		2) set -- --delete del.ids ;;
		3) set -- --compact ;;
		esac
		t0=$(date +%s%N)
		if [ "$1" = --append ]; then
			"$TQ_BIN/tq-build" --append want.tqi "$2"
		else
			"$TQ_BIN/tq-build" "$@" want.tqi
		fi
		# A kill anywhere from the start to a little past the end.
		ms=$(( ($(date +%s%N) - t0) / 1000000 * 12 / 10 + 1 ))
		[ $ms -le 999 ] || ms=999
		before=$(state $kind.tqi)
		after=$(state want.tqi)
		if [ "$1" = --append ]; then
			"$TQ_BIN/tq-build" --append $kind.tqi "$2" &
		else
			"$TQ_BIN/tq-build" "$@" $kind.tqi &
		fi
		pid=$!
		sleep "$(printf '0.%03d' $((RANDOM % ms)))"
		kill -KILL $pid 2>/dev/null || true
		wait $pid 2>/dev/null || true
		"$TQ_BIN/tq-inspect" --verify $kind.tqi >/dev/null
		now=$(state $kind.tqi)
		if [ "$now" = "$before" ]; then
			old=$((old + 1))
		elif [ "$now" = "$after" ]; then
			new=$((new + 1))
		else
			echo "kill $n ($kind $*): neither the old nor the new state" >&2
			false
		fi
		# Keep the indexes small: compact when they grow.
		[ "$("$TQ_BIN/tq-inspect" $kind.tqi | awk '/^vectors/ { print $2 }')" -lt 4000 ] ||
		    "$TQ_BIN/tq-build" --compact -o $kind.tqi "$kind.tqi"
		n=$((n + 1))
	done
	echo "# kills $n: old $old, new $new" >&3
	[ $old -gt 0 ] && [ $new -gt 0 ]
}

@test "a crash at each step of a commit: before the slot the old commit, after it the new" {
	local point st
	"$TQ_BIN/tq-build" -q "$F/ivf.tqq" -o idx.tqi "$F/base.bin"
	before=$(state idx.tqi)
	cp idx.tqi want.tqi
	"$TQ_BIN/tq-build" --append want.tqi "$F/b0.bin"
	after=$(state want.tqi)
	for point in table synced slot; do
		cp idx.tqi t.tqi
		st=0
		TQ_TEST_CRASH=$point "$TQ_BIN/tq-build" --append t.tqi "$F/b0.bin" || st=$?
		[ "$st" -eq 137 ]
		"$TQ_BIN/tq-inspect" --verify t.tqi >/dev/null
		if [ $point = slot ]; then
			[ "$(state t.tqi)" = "$after" ]
		else
			[ "$(state t.tqi)" = "$before" ]
			# The next writer drops the crashed one's bytes.
			"$TQ_BIN/tq-build" --append t.tqi "$F/b0.bin"
			[ "$(state t.tqi)" = "$after" ]
			[ "$(stat -c %s t.tqi)" = "$(stat -c %s want.tqi)" ]
		fi
	done
}

@test "format version 1 indexes are read, and a mutation writes version 2" {
	local f
	for f in v1-flat v1-ivf; do
		"$TQ_BIN/tq-inspect" "$FIXTURES/$f.tqi" | grep -qx 'version 1'
		"$TQ_BIN/tq-inspect" --verify "$FIXTURES/$f.tqi" >/dev/null
		"$TQ_BIN/tq-search" -k 5 $(all_lists "$FIXTURES/$f.tqi") -i "$F/q.bin" "$FIXTURES/$f.tqi" >v1.tsv
		# A delete of nothing new changes nothing; a real one rewrites.
		cp "$FIXTURES/$f.tqi" d.tqi
		echo 3 >three.ids
		"$TQ_BIN/tq-build" --delete three.ids d.tqi
		echo 7 >seven.ids
		"$TQ_BIN/tq-build" --delete seven.ids d.tqi
		"$TQ_BIN/tq-inspect" d.tqi | grep -qx 'version 2'
		"$TQ_BIN/tq-search" -k 5 $(all_lists "$FIXTURES/$f.tqi") -i "$F/q.bin" d.tqi >d.tsv
		! cut -f3 d.tsv | grep -qx -e 3 -e 5 -e 7
		grep -vP '\t7\t' v1.tsv | cut -f3 | head -3 >/dev/null
		# An append converts too, and searches see old and new rows.
		cp "$FIXTURES/$f.tqi" a.tqi
		"$TQ_BIN/tq-build" --append a.tqi "$F/b0.bin"
		"$TQ_BIN/tq-inspect" a.tqi | grep -qx 'version 2'
		"$TQ_BIN/tq-inspect" --verify a.tqi >/dev/null
		"$TQ_BIN/tq-build" --append a.tqi "$F/b1.bin"
		"$TQ_BIN/tq-inspect" a.tqi | grep -qx 'segments 2'
		"$TQ_BIN/tq-build" --compact -o c.tqi a.tqi
		"$TQ_BIN/tq-search" -k 5 $(all_lists "$FIXTURES/$f.tqi") -i "$F/q.bin" a.tqi >a.tsv
		"$TQ_BIN/tq-search" -k 5 $(all_lists "$FIXTURES/$f.tqi") -i "$F/q.bin" c.tqi >c.tsv
		cmp a.tsv c.tsv
	done
}
