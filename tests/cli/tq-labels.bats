#!/usr/bin/env bats
# Labels in an index (#19): tq-build --labels auto|FILE, tq-search
# --labels, --like, --like-file and --include-self, labels through
# appends, deletes and compactions, flat and IVF, and the same index from
# GloVe text, fastText .vec and word2vec binary (written by tq-cat).

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 12 200 41 --clusters 5
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o "$F/q.tq"
	"$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 6 -o "$F/ivf.tq"
	# GloVe layout: the row numbers made words, then the values.
	"$TQ_BIN/tq-cat" -f text --labels "$F/c.bin" | sed 's/^/w/' >"$F/c.glove"
	cut -d' ' -f1 "$F/c.glove" >"$F/c.labels"
	"$TQ_BIN/tq-cat" -f text "$F/c.bin" >"$F/c.txt"
	"$TQ_BIN/tq-cat" -f vec -o "$F/c.vec" "$F/c.glove"
	"$TQ_BIN/tq-cat" -f w2v -o "$F/c.w2v" "$F/c.glove"
	for k in q ivf; do
		"$TQ_BIN/tq-build" -q "$F/$k.tq" --labels auto \
		    -o "$F/$k.tqi" "$F/c.glove"
		"$TQ_BIN/tq-build" -q "$F/$k.tq" -o "$F/$k-nolab.tqi" "$F/c.bin"
	done
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
}

# The values of row `word` of the GloVe file, as a query file.
row_of() { grep "^$1 " "$F/c.glove" | cut -d' ' -f2-; }

@test "GloVe text, .vec, word2vec and numbers with a labels file: the same index" {
	local k
	# tq-cat wrote real .vec and word2vec files.
	[ "$(head -1 "$F/c.vec")" = "200 12" ]
	[ "$(head -c 7 "$F/c.w2v")" = "200 12" ]
	[[ "$(sed -n 2p "$F/c.vec")" == "w0 "* ]]
	for k in q ivf; do
		"$TQ_BIN/tq-build" -q "$F/$k.tq" --labels auto -o v.tqi "$F/c.vec"
		"$TQ_BIN/tq-build" -q "$F/$k.tq" --labels auto -o w.tqi "$F/c.w2v"
		"$TQ_BIN/tq-build" -q "$F/$k.tq" --labels "$F/c.labels" \
		    -o t.tqi "$F/c.txt"
		"$TQ_BIN/tq-build" -q "$F/$k.tq" --labels auto -o p.tqi - \
		    <"$F/c.w2v"
		cmp v.tqi "$F/$k.tqi"
		cmp w.tqi "$F/$k.tqi"
		cmp t.tqi "$F/$k.tqi"
		cmp p.tqi "$F/$k.tqi"
	done
	# Fitted on the fly (centred on the corpus, cosine), f16 originals.
	"$TQ_BIN/tq-build" -m cosine --originals f16 --labels auto -o a.tqi \
	    "$F/c.glove"
	"$TQ_BIN/tq-build" -m cosine --originals f16 --labels auto -o b.tqi \
	    "$F/c.w2v"
	cmp a.tqi b.tqi
	# Labels are a section of their own: without them, the same rows.
	run "$TQ_BIN/tq-inspect" "$F/q.tqi"
	[[ "$output" == *$'\nlabels 200\n'* ]] || { show; false; }
	[[ "$output" == *"  LABL  offset "*"segment 0"* ]] || { show; false; }
	run "$TQ_BIN/tq-inspect" "$F/q-nolab.tqi"
	[[ "$output" != *labels* && "$output" != *LABL* ]] || { show; false; }
	run "$TQ_BIN/tq-inspect" --json "$F/ivf.tqi"
	[[ "$output" == *'"labels":200,'* ]] || { show; false; }
}

@test "tq-cat -f vec and -f w2v: the count from a pipe, labels round-trip" {
	"$TQ_BIN/tq-cat" -f w2v <"$F/c.glove" >p.w2v
	cmp p.w2v "$F/c.w2v"
	"$TQ_BIN/tq-cat" -f vec <"$F/c.glove" >p.vec
	cmp p.vec "$F/c.vec"
	"$TQ_BIN/tq-cat" -o x.vec --rows 3:5 "$F/c.w2v"
	[ "$(head -1 x.vec)" = "2 12" ]
	[ "$(cut -d' ' -f1 x.vec | tail -2 | tr '\n' ' ')" = "w3 w4 " ]
	# And back to GloVe text, byte for byte.
	"$TQ_BIN/tq-cat" -f text --labels "$F/c.w2v" >back.glove
	cmp back.glove "$F/c.glove"
}

@test "--like equals a search with the row's vector, without and with the row" {
	local k w
	for k in q ivf; do
		for w in w5 w117; do
			row_of $w >qv.txt
			"$TQ_BIN/tq-search" -k 6 --labels -i qv.txt "$F/$k.tqi" |
			    cut -f3- | grep -v -P "\t$w\$" | head -5 >want
			"$TQ_BIN/tq-search" -k 5 --like "$F/$k.tqi" $w |
			    cut -f3- >got
			[ "$(wc -l <got)" = 5 ]
			diff want got
			# --include-self: exactly the search with the vector,
			# the row first (its own original: distance ~0).
			"$TQ_BIN/tq-search" -k 5 --labels -i qv.txt \
			    "$F/$k.tqi" >want
			"$TQ_BIN/tq-search" -k 5 --like --include-self \
			    "$F/$k.tqi" $w >got
			diff want got
			[ "$(head -1 got | cut -f5)" = "$w" ]
		done
	done
	# Re-ranked, and two words in one call: query numbers in order.
	(row_of w5; row_of w117) >q2.txt
	"$TQ_BIN/tq-search" -k 4 --oversample 3 --labels \
	    -i q2.txt "$F/q.tqi" >want
	"$TQ_BIN/tq-search" -k 4 --oversample 3 --include-self --like \
	    "$F/q.tqi" w5 w117 >got
	diff want got
	# --like-file, from a pipe: the same as the arguments.
	"$TQ_BIN/tq-search" -k 4 --like "$F/ivf.tqi" w5 w117 >want
	printf 'w5\r\nw117\n' | "$TQ_BIN/tq-search" -k 4 --like-file - \
	    "$F/ivf.tqi" >got
	diff want got
	# A range search leaves the row out too.
	"$TQ_BIN/tq-search" --radius 1e9 -k 3 --like "$F/q.tqi" w5 >got
	[ "$(wc -l <got)" = 3 ]
	! grep -qP '\tw5$' got
}

@test "labels in tsv and JSON; without --labels the output is that of an index without labels" {
	"$TQ_BIN/tq-search" -k 3 -i "$F/c.bin" "$F/q.tqi" >lab.tsv
	"$TQ_BIN/tq-search" -k 3 -i "$F/c.bin" "$F/q-nolab.tqi" >nolab.tsv
	cmp lab.tsv nolab.tsv
	"$TQ_BIN/tq-search" -k 3 --format json -i "$F/c.bin" "$F/ivf.tqi" >lab.json
	"$TQ_BIN/tq-search" -k 3 --format json -i "$F/c.bin" "$F/ivf-nolab.tqi" >nolab.json
	cmp lab.json nolab.json
	"$TQ_BIN/tq-search" -k 3 --labels -i "$F/c.bin" "$F/q.tqi" >l.tsv
	# The first four fields are unchanged, the fifth is "w" and the id.
	diff <(cut -f1-4 l.tsv) lab.tsv
	awk -F'\t' 'NF != 5 || $5 != "w" $3 { exit 1 }' l.tsv
	"$TQ_BIN/tq-search" -k 2 --labels --format json -i "$F/c.bin" \
	    "$F/q.tqi" | head -1 >l.json
	"$PY" - l.json <<'EOF'
import json, sys
o = json.loads(open(sys.argv[1]).read())
assert o["labels"] == ["w%d" % i for i in o["ids"]], o
assert o["ids"][0] == 0, o
EOF
	# ivecs holds ids only.
	"$TQ_BIN/tq-search" -k 2 --format ivecs --like "$F/q.tqi" w1 >l.ivecs
	[ "$(stat -c %s l.ivecs)" = 12 ]
}

@test "append, delete and compact keep the labels (flat and IVF)" {
	local k
	head -150 "$F/c.glove" >a.glove
	tail -50 "$F/c.glove" >b.glove
	for k in q ivf; do
		"$TQ_BIN/tq-build" -q "$F/$k.tq" --labels auto -o x.tqi a.glove
		"$TQ_BIN/tq-build" --append --labels auto x.tqi b.glove
		run "$TQ_BIN/tq-inspect" x.tqi
		[[ "$output" == *$'\nsegments 2\n'* ]] || { show; false; }
		[[ "$output" == *$'\nlabels 200\n'* ]] || { show; false; }
		# Searches over two segments equal those over one.
		"$TQ_BIN/tq-search" -k 5 --like x.tqi w3 w160 >got
		"$TQ_BIN/tq-search" -k 5 --like "$F/$k.tqi" w3 w160 >want
		diff want got
		"$TQ_BIN/tq-build" --compact -o y.tqi x.tqi
		cmp y.tqi "$F/$k.tqi"
		# A labels file for the appended rows, from a pipe.
		"$TQ_BIN/tq-build" -q "$F/$k.tq" --labels auto -o z.tqi a.glove
		"$TQ_BIN/tq-build" --append --labels <(tail -50 "$F/c.labels") \
		    z.tqi <(tail -50 "$F/c.txt")
		"$TQ_BIN/tq-build" --compact z.tqi
		cmp z.tqi "$F/$k.tqi"

		# Delete w5: no longer found, nor returned; a compaction
		# equals a fresh build of the other rows with their ids.
		printf '5\n' >gone.ids
		"$TQ_BIN/tq-build" --delete gone.ids x.tqi
		run --separate-stderr "$TQ_BIN/tq-search" --like x.tqi w5
		assert_fail1 tq-search "x.tqi: unknown label 'w5'"
		# Every list of the IVF index, so that every row can come.
		"$TQ_BIN/tq-search" -k 199 $([ $k = ivf ] && echo --probes 6) \
		    --like x.tqi w6 >got
		[ "$(wc -l <got)" = 198 ]
		! grep -qP '\tw5$' got
		"$TQ_BIN/tq-build" --compact -o y.tqi x.tqi
		grep -v '^w5 ' "$F/c.glove" >rest.glove
		(seq 0 4; seq 6 199) >rest.ids
		"$TQ_BIN/tq-build" -q "$F/$k.tq" --labels auto --ids rest.ids \
		    -o fresh.tqi rest.glove
		cmp y.tqi fresh.tqi
	done
	# An append past --max-segments rewrites the index: labels too.
	"$TQ_BIN/tq-build" -q "$F/q.tq" --labels auto -o m.tqi a.glove
	"$TQ_BIN/tq-build" --append --max-segments 1 --labels auto m.tqi b.glove
	cmp m.tqi "$F/q.tqi"
}

@test "a label that several rows share: the smallest id is the query" {
	# Row 9 is labelled w3 too; the ids count down, so its id is smaller.
	sed '10s/^w9 /w3 /' "$F/c.glove" >d.glove
	seq 1000 -1 801 >down.ids
	"$TQ_BIN/tq-build" -q "$F/q.tq" --labels auto --ids down.ids -o d.tqi \
	    d.glove
	run "$TQ_BIN/tq-search" -k 1 --include-self --like d.tqi w3
	assert_status 0
	[ "$(cut -f3,5 <<<"$output")" = $'991\tw3' ] || { show; false; }
	# Without row 9, row 3 is the one.
	echo 991 >gone.ids
	"$TQ_BIN/tq-build" --delete gone.ids d.tqi
	run "$TQ_BIN/tq-search" -k 1 --include-self --like d.tqi w3
	[ "$(cut -f3,5 <<<"$output")" = $'997\tw3' ] || { show; false; }
}

@test "an index without originals: --like searches with the decoded row" {
	# f32 factors: tq-encode's stream keeps s in f32, and compact factors
	# (the default) decode with s as stored, rounded to f16.
	"$TQ_BIN/tq-build" -q "$F/q.tq" --originals none --factors f32 \
	    --labels auto -o n.tqi "$F/c.glove"
	# The row's codes, decoded by tq-encode, are the query.
	row_of w42 >qv.txt
	"$TQ_BIN/tq-encode" -q n.tqi -i qv.txt -o qv.codes
	"$TQ_BIN/tq-encode" --decode -q n.tqi -i qv.codes -o qv.bin
	"$TQ_BIN/tq-search" -k 5 --labels -i qv.bin n.tqi >want
	"$TQ_BIN/tq-search" -k 5 --include-self --like n.tqi w42 >got
	diff want got
	# Not the original's search (that would make the test vacuous).
	"$TQ_BIN/tq-search" -k 5 --labels -i qv.txt n.tqi >orig
	! cmp -s orig got
}

@test "residual codes without originals: --like decodes about the row's list" {
	"$TQ_BIN/tq-fit" -i "$F/c.bin" --lists 6 --residual -o r.tq
	"$TQ_BIN/tq-build" -q r.tq --originals none --labels auto -o r.tqi \
	    "$F/c.glove"
	# A row decoded about the centre instead would lie far from itself.
	for w in w3 w42 w150; do
		run --separate-stderr "$TQ_BIN/tq-search" -k 1 --probes 6 \
		    --include-self --like r.tqi $w
		assert_status 0
		[ "$(cut -f5 <<<"$output")" = $w ] || { show; false; }
		awk -F'\t' '{ exit !($4 < 0.05) }' <<<"$output" || { show; false; }
	done
}

@test "labels refused: auto without labels, counts, an index with or without labels" {
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/q.tq" --labels auto \
	    -o x.tqi "$F/c.bin"
	assert_fail1 tq-build "c.bin: --labels auto: the input has no labels"
	head -199 "$F/c.labels" >short.labels
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/q.tq" \
	    --labels short.labels -o x.tqi "$F/c.bin"
	assert_fail1 tq-build "short.labels: 199 labels for 200 rows"
	# A pipe of rows: counted when the rows end.
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/ivf.tq" \
	    --labels short.labels -o x.tqi - <"$F/c.txt"
	assert_fail1 tq-build \
	    "short.labels: the labels file has 199 labels but the corpus has 200 rows"
	cp "$F/q.tqi" x.tqi
	run --separate-stderr "$TQ_BIN/tq-build" --append x.tqi "$F/c.bin"
	assert_fail1 tq-build "the index has labels: the new rows need them too"
	cmp x.tqi "$F/q.tqi"
	cp "$F/q-nolab.tqi" y.tqi
	run --separate-stderr "$TQ_BIN/tq-build" --append --labels auto y.tqi \
	    "$F/c.glove"
	assert_fail1 tq-build "y.tqi: the index has no labels to add to"
	cmp y.tqi "$F/q-nolab.tqi"
	run --separate-stderr "$TQ_BIN/tq-search" --like "$F/q-nolab.tqi" w1
	assert_fail1 tq-search "--like needs an index with labels"
	# Every label is found before any search: no output at all.
	run --separate-stderr "$TQ_BIN/tq-search" --like -o out.tsv \
	    "$F/q.tqi" w1 nosuch
	assert_fail1 tq-search "q.tqi: unknown label 'nosuch'"
	[ ! -e out.tsv ]
}

@test "a hostile LABL: orders out of range or unsorted fail the lookup, one line, no crash" {
	local off
	off=$("$TQ_BIN/tq-inspect" --json "$F/q.tqi" | "$PY" -c '
import json, sys
print([s for s in json.load(sys.stdin)["sections"] if s["tag"] == "LABL"][0]["offset"])')
	# Width 4, 200 rows: offsets at 32, by label at 836, by id at 1636.
	cp "$F/q.tqi" range.tqi
	"$PY" - range.tqi "$off" <<'PY'
import struct, sys
f = open(sys.argv[1], "r+b"); at = int(sys.argv[2]) + 32 + 4 * 201
f.seek(at); f.write(struct.pack("<200I", *([4000000000] * 200)))
PY
	run --separate-stderr "$TQ_BIN/tq-search" --like range.tqi w7
	assert_fail1 tq-search "range.tqi: segment 0: section LABL: row 4000000000 out of range"
	# Every entry of the by-id order names row 0: other ids are not found.
	cp "$F/q.tqi" byid.tqi
	"$PY" - byid.tqi "$off" <<'PY'
import struct, sys
f = open(sys.argv[1], "r+b"); at = int(sys.argv[2]) + 32 + 4 * 401
f.seek(at); f.write(struct.pack("<200I", *([0] * 200)))
PY
	run --separate-stderr "$TQ_BIN/tq-search" -k 3 --labels -i "$F/c.bin" \
	    -o out.tsv byid.tqi
	assert_fail1 tq-search "byid.tqi: section LABL: no label for id"
	[ ! -e out.tsv ]
	# Both still open, and --verify sees the damage.
	"$TQ_BIN/tq-inspect" byid.tqi >/dev/null
	run --separate-stderr "$TQ_BIN/tq-inspect" --verify byid.tqi
	assert_fail1 tq-inspect "section LABL: checksum"
}
