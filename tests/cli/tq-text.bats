#!/usr/bin/env bats
# Text and word2vec vectors, labels, and every input from a pipe (#15, #19):
# tq-build and tq-search on text from printf, GloVe-style labelled text,
# fastText .vec and word2vec binary equal to the same rows as a fixture;
# .fvecs/.ivecs/.bvecs on standard input; ids from process substitution.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 8 200 31 --clusters 4
	mkfix "$F/q.bin" 8 5 32
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o "$F/q.tq"
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o "$F/ref.tqi" "$F/c.bin"
	# The same rows as text (%.9g round-trips a float32), labelled text,
	# .vec, word2vec and *vecs.
	"$PY" - "$F" <<'PY'
import struct, sys
F = sys.argv[1]
def rows(p):
    b = open(p, "rb").read()
    d, n = struct.unpack("<II", b[:8])
    return [struct.unpack("<%df" % d, b[8 + 4 * d * i:8 + 4 * d * (i + 1)]) for i in range(n)], d
for name in ("c", "q"):
    x, d = rows("%s/%s.bin" % (F, name))
    words = ["w%d" % i for i in range(len(x))]
    num = lambda r: ["%.9g" % v for v in r]
    open("%s/%s.txt" % (F, name), "w").write("".join(" ".join(num(r)) + "\n" for r in x))
    open("%s/%s.csv" % (F, name), "w").write("".join(",".join(num(r)) + "\r\n" for r in x))
    open("%s/%s.glove" % (F, name), "w").write("".join(w + " " + " ".join(num(r)) + "\n" for w, r in zip(words, x)))
    open("%s/%s.vec" % (F, name), "w").write("%d %d\n" % (len(x), d) + "".join(w + " " + " ".join(num(r)) + " \n" for w, r in zip(words, x)))
    open("%s/%s.w2v" % (F, name), "wb").write(b"%d %d\n" % (len(x), d) + b"".join(w.encode() + b" " + struct.pack("<%df" % d, *r) + b"\n" for w, r in zip(words, x)))
    open("%s/%s.fvecs" % (F, name), "wb").write(b"".join(struct.pack("<i%df" % d, d, *r) for r in x))
PY
	"$TQ_BIN/tq-search" -k 3 -i "$F/q.bin" "$F/ref.tqi" >"$F/ref.tsv"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
}

@test "tq-build: text from printf on stdin" {
	printf '1 2 3\n4 5 6\n-1 0.5 2e-1\n' | "$TQ_BIN/tq-build" -o a.tqi -
	run --separate-stderr "$TQ_BIN/tq-inspect" a.tqi
	assert_status 0
	grep -qx 'vectors 3' <<<"$output"
	# The same rows as a fixture give the same index.
	"$PY" -c '
import struct, sys
r = [(1, 2, 3), (4, 5, 6), (-1, 0.5, 0.2)]
sys.stdout.buffer.write(struct.pack("<II", 3, 3) + b"".join(struct.pack("<3f", *v) for v in r))' >a.bin
	"$TQ_BIN/tq-fit" -d 3 -o q.tq
	printf '1 2 3\n4 5 6\n-1 0.5 2e-1\n' | "$TQ_BIN/tq-build" -q q.tq -o b.tqi -
	"$TQ_BIN/tq-build" -q q.tq -o c.tqi a.bin
	cmp b.tqi c.tqi
}

@test "tq-build: text, CSV with CRLF, GloVe, .vec and word2vec equal the fixture" {
	local f
	for f in c.txt c.csv c.glove c.vec c.w2v c.fvecs; do
		"$TQ_BIN/tq-build" -q "$F/q.tq" -o "$f.tqi" "$F/$f"
		cmp "$F/ref.tqi" "$f.tqi"
		# From a pipe, standard input and process substitution too.
		cat "$F/$f" | "$TQ_BIN/tq-build" -q "$F/q.tq" -o p.tqi -
		cmp "$F/ref.tqi" p.tqi
		"$TQ_BIN/tq-build" -q "$F/q.tq" -o s.tqi - <"$F/$f"
		cmp "$F/ref.tqi" s.tqi
		"$TQ_BIN/tq-build" -q "$F/q.tq" -o r.tqi <(cat "$F/$f")
		cmp "$F/ref.tqi" r.tqi
	done
}

@test "tq-build: zstd-compressed text and word2vec" {
	zstd -q -c "$F/c.glove" >c.glove.zst
	zstd -q -c "$F/c.w2v" >c.w2v.zst
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o a.tqi c.glove.zst
	cmp "$F/ref.tqi" a.tqi
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o b.tqi - <c.w2v.zst
	cmp "$F/ref.tqi" b.tqi
}

@test "tq-search: queries as text, labelled text, word2vec and fvecs on stdin" {
	local f
	for f in q.txt q.glove q.vec q.w2v q.fvecs; do
		run --separate-stderr "$TQ_BIN/tq-search" -k 3 "$F/ref.tqi" <"$F/$f"
		assert_status 0
		assert_equal "$output" "$(cat "$F/ref.tsv")"
		cat "$F/$f" | "$TQ_BIN/tq-search" -k 3 "$F/ref.tqi" >p.tsv
		cmp "$F/ref.tsv" p.tsv
	done
}

@test "tq-search: .fvecs on standard input needs no name" {
	tq tofvecs "$F/q.bin" q.fvecs
	"$TQ_BIN/tq-search" -k 3 "$F/ref.tqi" <q.fvecs >a.tsv
	cmp "$F/ref.tsv" a.tsv
	cat q.fvecs | "$TQ_BIN/tq-search" -k 3 -i - "$F/ref.tqi" >b.tsv
	cmp "$F/ref.tsv" b.tsv
}

@test "tq-recall: ivecs results and truth on pipes" {
	"$TQ_BIN/tq-recall" --truth -k 3 -o truth.ivecs "$F/c.bin" "$F/q.bin"
	"$TQ_BIN/tq-search" --format ivecs -k 3 -i "$F/q.bin" "$F/ref.tqi" >res.ivecs
	"$TQ_BIN/tq-recall" res.ivecs truth.ivecs >a.out
	"$TQ_BIN/tq-recall" <(cat res.ivecs) <(cat truth.ivecs) >b.out
	cmp a.out b.out
}

@test "tq-build --append: ids from process substitution and stdin" {
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o a.tqi --ids <(seq 1000 1199) "$F/c.bin"
	"$TQ_BIN/tq-build" --append --ids <(seq 5000 5004) a.tqi "$F/q.bin"
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 -i "$F/q.bin" a.tqi
	assert_status 0
	assert_equal "$(cut -f3 <<<"$output" | tr '\n' ' ')" "5000 5001 5002 5003 5004 "
	seq 6000 6004 | "$TQ_BIN/tq-build" --append --ids - a.tqi "$F/q.bin"
	# Too few ids on a pipe: the ids file is named.
	run --separate-stderr "$TQ_BIN/tq-build" --append --ids <(seq 7000 7003) a.tqi "$F/q.bin"
	assert_fail1 tq-build "the ids file has 4 ids but the corpus has 5 rows"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/q.tq" -o b.tqi --ids <(seq 1 201) "$F/c.bin"
	assert_fail1 tq-build "the ids file has more ids than the corpus has rows"
}

@test "tq-build: a corpus on a pipe is read once" {
	"$TQ_BIN/tq-build" -o a.tqi - <"$F/c.bin"
	"$TQ_BIN/tq-build" -o b.tqi <(cat "$F/c.bin")
	cmp a.tqi b.tqi
	run --separate-stderr "$TQ_BIN/tq-build" --lists 2 -o c.tqi <(cat "$F/c.bin")
	assert_fail1 tq-build "--lists needs a corpus file, not a pipe"
	assert_only_files . a.tqi b.tqi
}

@test "bad text and word2vec: one line naming the file, line and column" {
	run --separate-stderr "$TQ_BIN/tq-build" -o a.tqi - < <(printf '1 2 3\n4 5\n')
	assert_fail1 tq-build "stdin: line 2: 2 values, expected 3"
	printf '1 2\n3 x\n' >bad.txt
	run --separate-stderr "$TQ_BIN/tq-build" -o a.tqi bad.txt
	assert_fail1 tq-build "bad.txt: line 2, column 3: not a number: 'x'"
	run --separate-stderr "$TQ_BIN/tq-search" -k 1 "$F/ref.tqi" < <(printf '1 2 3 4 5 6 7 inf\n')
	assert_fail1 tq-search "stdin: line 1, column 15: value is NaN or infinite"
	head -c 100 "$F/c.w2v" >short.w2v
	run --separate-stderr "$TQ_BIN/tq-build" -o a.tqi - < <(cat short.w2v)
	assert_fail1 tq-build "stdin: truncated at row 2 of 200 (word2vec)"
	run --separate-stderr "$TQ_BIN/tq-build" -o a.tqi short.w2v
	assert_fail1 tq-build "short.w2v: header claims 200 rows of dim 8 but the file holds 100 bytes"
	assert_only_files . bad.txt short.w2v
}

@test "what needs a seekable file says so in one line" {
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/q.tq" --shard 0/2 -o a.tqi - < <(cat "$F/c.txt")
	assert_fail1 tq-build "--shard needs a row count known in advance"
	# A .vec file has its count; its first shard needs no seek.
	"$TQ_BIN/tq-build" -q "$F/q.tq" --shard 0/2 -o a.tqi "$F/c.vec"
	run --separate-stderr "$TQ_BIN/tq-build" -q "$F/q.tq" --shard 1/2 -o b.tqi "$F/c.vec"
	assert_fail1 tq-build "c.vec: cannot seek in this input"
	"$TQ_BIN/tq-build" -q "$F/q.tq" --shard 1/2 -o b.tqi "$F/c.fvecs"
	printf '\x89HDF\r\n\x1a\n' | cat - "$F/c.bin" >x.h5
	run --separate-stderr "$TQ_BIN/tq-build" -o c.tqi - < <(cat x.h5)
	assert_fail1 tq-build "stdin: HDF5 input must be a regular file, not a pipe or standard input"
}

@test "tq-recall: an evaluation's corpus must be a file, a query file may be a pipe" {
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus <(cat "$F/c.bin") --queries "$F/q.bin"
	assert_fail1 tq-recall "--corpus is read more than once: it needs a file, not a pipe or standard input"
	run --separate-stderr "$TQ_BIN/tq-recall" -k 3 --corpus "$F/c.bin" --queries <(cat "$F/q.txt")
	assert_status 0
}
