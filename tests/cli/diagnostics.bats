#!/usr/bin/env bats
# The DIAGNOSTICS sections of the man pages, message by message.
#
# A page lists each message as a list item '.It "TEXT"' under DIAGNOSTICS,
# words in capitals (FILE, N, NAME, ...) standing for the values of the
# actual message.  One test per program provokes every message its page
# lists, checks the exact line printed (status 1, or 2 and the usage for a
# usage error) and that it reads as the item, and at the end that no item
# of the page was left without a case.

load helpers

MAL="$BATS_TEST_DIRNAME/../malformed"

setup_file() {
	local F=$BATS_FILE_TMPDIR
	cd "$F"
	mkfix c.bin 16 300 1 --clusters 4
	mkfix c8.bin 8 50 2
	mkfix nan.bin 16 40 3 --nan 17
	"$TQ_BIN/tq-fit" -i c.bin -o q.tq
	"$TQ_BIN/tq-fit" -i c.bin --lists 4 -o ivf.tq
	"$TQ_BIN/tq-fit" -i c.bin --lists 4 --residual -o rivf.tq
	"$TQ_BIN/tq-build" -q q.tq -o i.tqi c.bin
	"$TQ_BIN/tq-build" -q q.tq --originals none -o noorig.tqi c.bin
	"$TQ_BIN/tq-encode" -q q.tq -i c.bin -o x.codes

	# Bad vector files, one per reader message.
	: >empty.bin
	printf '\x10\x00\x00\x00\x00\x00\x00\x00' >zero.bin
	printf 'hello\n' >hdr.bin
	printf 'hello world!\n' >unrec.bin
	head -c 500 c.bin >short.bin
	"$PY" - <<'EOF'
import struct
row = struct.pack('<i', 16) + struct.pack('<16f', *range(16))
open('dims.fvecs', 'wb').write(row + struct.pack('<i', 3) + bytes(64))
open('part.fvecs', 'wb').write(row + bytes(5))
# One row, for an index whose ids do not fit in int32.
open('one.bin', 'wb').write(struct.pack('<II', 16, 1) + struct.pack('<16f', *range(16)))
# Text, .vec and word2vec of dim 16, one file per message.
line = " ".join(str(i) for i in range(16)) + "\n"
open('t-fields.txt', 'w').write(line + line[:-4] + "\n")
open('t-word.txt', 'w').write(line + "0 1 x" + line[5:])
open('t-nan.txt', 'w').write(line + "0 nan" + line[3:])
open('t-blank.txt', 'w').write(line + "\n" + line)
open('t-long.txt', 'w').write(line + "1 " * (600 * 1024) + "\n")
open('t-fewer.vec', 'w').write("3 16\n" + "a" * 20 + " " + line + "b" * 20 + " " + line)
open('t-more.vec', 'w').write("1 16\n" + "a " + line + "b " + line)
f16 = struct.pack('<16f', *range(16))
w2v = b"3 16\n" + b"".join(w * 30 + b" " + f16 + b"\n" for w in (b"a", b"b", b"c"))
open('t-cut.w2v', 'wb').write(w2v[:250])
open('t-word.w2v', 'wb').write(b"1 16\n" + b"a" * 5000 + b" " + f16)
open('t-claims.w2v', 'wb').write(b"1000 16\nthe " + f16 + b"\n")
# Row 7 of norm 2e19: its square overflows f32 for l2 and ip (tq(5)).
rows = [[0.5 * (i % 7 - 3)] * 16 for i in range(20)]
rows[7][2] = 2e19
open('bignorm.bin', 'wb').write(struct.pack('<II', 16, 20) +
    b"".join(struct.pack('<16f', *r) for r in rows))
EOF
	cp "$MAL/vec/big-endian.npy" be.npy
	zstd -q -o c.bin.zst c.bin
	head -c 200 c.bin.zst >cut.zst

	# Ids.
	seq 1 5 >few.ids
	printf '1\nx\n' >bad.ids
	echo 99999999999999999999 >ovf.ids
	printf '12345' >s.u64
	seq 0 299 >all.ids
	"$PY" -c 'print("\n".join(str(2**31 + i) for i in range(300)))' >big.ids
	"$TQ_BIN/tq-build" -q q.tq --ids big.ids -o big.tqi c.bin

	# Labels.
	seq 0 299 | sed 's/^/w/' >all.labels
	seq 1 5 | sed 's/^/w/' >few.labels
	printf 'a\n\nb\n' >empty.labels
	printf 'a\nb\0c\n' >nul.labels
	"$PY" -c 'print("x" * 5000)' >long.labels
	: >none.labels
	"$TQ_BIN/tq-build" -q q.tq --labels all.labels -o lab.tqi c.bin

	# Damaged tq files.
	head -c 6000 i.tqi >cut.tqi
	head -c 300 q.tq >cutq.tq
	# The other factor layout, a calibration and an IVF index with
	# copies: make-index-cases then also damages the lists (IVFC).
	"$TQ_BIN/tq-build" -q q.tq --factors f32 -o dg-f32.tqi c.bin
	"$TQ_BIN/tq-build" -q q.tq --calibrate-sample 50 -o dg-cal.tqi c.bin
	"$TQ_BIN/tq-build" -q ivf.tq --originals f16 --dups 2 --dup-ratio 1000 \
	    --no-calibrate -o dg-ivf.tqi c.bin
	"$PY" "$MAL/make-index-cases" i.tqi q.tq cases dg-f32.tqi dg-cal.tqi \
	    dg-ivf.tqi >/dev/null
	for c in c-version-99 s-header-hash s-table-hash c-code-offset-past-end \
	    c-fach-overlaps-code qi-missing-cbok s-payload-code \
	    qi-ivfc-encoding-2; do
		cp cases/$c $c.tqi
	done

	# Code streams.
	local rec=$(( ($(stat -c %s x.codes) - 48) / 300 ))
	head -c $((48 + 10 * rec)) x.codes >ten.codes
	cp x.codes trail.codes
	printf 'abc' >>trail.codes
	"$PY" -c 'import sys; d = bytearray(open("x.codes", "rb").read()); d[8] = 2; open("v.codes", "wb").write(d)'
	"$TQ_BIN/tq-fit" -i c.bin -s 7 -o q7.tq
	"$TQ_BIN/tq-fit" -i c.bin -b 2 -o q2.tq

	# Comparisons.
	tq mkivecs t1.ivecs '0 1 2'
	tq mkivecs t2.ivecs '0 1 2;3 4 5'
}

setup() {
	cd "$BATS_FILE_TMPDIR"
	SEEN=()
}

# The items under DIAGNOSTICS in man/PROG.1, as plain text.
diag_items() {
	awk '/^\.Sh / { on = ($0 == ".Sh DIAGNOSTICS") } on && /^\.It "/' \
	    "$TOP/man/$1.1" |
	    sed -e 's/^\.It "//' -e 's/"$//' -e 's/\\-/-/g' -e "s/\\\\(aq/'/g" \
	    -e 's/\\(dq/"/g'
}

# The glob an item stands for: each placeholder matches anything.
diag_glob() {
	printf '%s' "$1" | sed -e 's/[][*?\\]/\\&/g' \
	    -e 's/\b\(FILE\|ARG\|NAME\|LIST\|MODE\|OPTION\|KIND\|TAG\|ERROR\|LO\|HI\|[A-Z]\)\b/*/g'
}

# diag PROG STATUS 'ITEM' 'TEXT': the last run failed with STATUS (2: a
# usage error, followed by the usage), its one-line message is "PROG: TEXT"
# (TEXT is a glob; most are plain text) and reads as ITEM, which man/PROG.1
# lists under DIAGNOSTICS.
diag() {
	local prog=$1 st=$2 item=$3 text=$4 line glob
	if [ "$st" = 2 ]; then
		assert_usage_error "$prog" || return 1
	else
		assert_fail1 "$prog" || return 1
	fi
	line=${stderr_lines[0]#"$prog: "}
	# shellcheck disable=SC2053
	if [[ $line != $text ]]; then
		printf 'expected: %s\n     got: %s\n' "$text" "$line" >&2
		return 1
	fi
	glob=$(diag_glob "$item")
	# shellcheck disable=SC2053
	if [[ $line != $glob ]]; then
		printf "'%s' does not read as '%s'\n" "$line" "$item" >&2
		return 1
	fi
	if ! diag_items "$prog" | grep -qxF -- "$item"; then
		echo "'$item' is not under DIAGNOSTICS in $prog.1" >&2
		return 1
	fi
	SEEN+=("$item")
}

# expect STATUS 'ITEM' 'TEXT' PROG ARG...: runs the program and checks
# its message with diag.
expect() {
	local st=$1 item=$2 text=$3 prog=$4
	shift 4
	run --separate-stderr "$TQ_BIN/$prog" "$@"
	diag "$prog" "$st" "$item" "$text"
}

# Every item under DIAGNOSTICS in man/PROG.1 had a case in this test.
all_seen() {
	local prog=$1 item s found missing=0 n=0
	while IFS= read -r item; do
		n=$((n + 1))
		found=0
		for s in "${SEEN[@]}"; do
			[ "$s" = "$item" ] && { found=1; break; }
		done
		if [ $found = 0 ]; then
			echo "$prog.1 lists '$item' but no case produced it" >&2
			missing=1
		fi
	done < <(diag_items "$prog")
	assert_ge $n 5
	[ $missing = 0 ]
}

# norm_case PROG ARG...: a row of norm 2e19 (bignorm.bin, row 7) refused.
BIGNORM='FILE: row R: norm V is too large for M (above 2^62 = 4.6e18, scores overflow float; scale the data down)'
norm_case() {
	expect 1 "$BIGNORM" "bignorm.bin: row 7: norm 2e+19 is too large for l2 (above 2^62 = 4.6e18, scores overflow float; scale the data down)" "$@"
}

# with FILE PROG ARG...: the arguments with {} replaced by FILE.
with_file() {
	local file=$1 a
	shift
	ARGS=()
	for a in "$@"; do
		if [ "$a" = "{}" ]; then ARGS+=("$file"); else ARGS+=("$a"); fi
	done
}

# reader_cases PROG ARG...: the vector readers' messages, for a program
# whose arguments take the bad file in place of {}.
reader_cases() {
	local prog=$1
	shift
	with_file missing.bin "$@"
	expect 1 'FILE: open: No such file or directory' \
	    'missing.bin: open: No such file or directory' "$prog" "${ARGS[@]}"
	with_file empty.bin "$@"
	expect 1 'FILE: no vectors (empty input)' \
	    'empty.bin: no vectors (empty input)' "$prog" "${ARGS[@]}"
	with_file zero.bin "$@"
	expect 1 'FILE: no vectors' 'zero.bin: no vectors' "$prog" "${ARGS[@]}"
	with_file hdr.bin "$@"
	expect 1 'FILE: truncated header (N bytes)' \
	    'hdr.bin: truncated header (6 bytes)' "$prog" "${ARGS[@]}"
	with_file unrec.bin "$@"
	expect 1 'FILE: not a vector file (unrecognised header)' \
	    'unrec.bin: not a vector file (unrecognised header)' "$prog" "${ARGS[@]}"
	with_file short.bin "$@"
	expect 1 'FILE: header claims N rows of dim D (B bytes) but the file holds M bytes' \
	    'short.bin: header claims 300 rows of dim 16 (19208 bytes) but the file holds 500 bytes' \
	    "$prog" "${ARGS[@]}"
	with_file part.fvecs "$@"
	expect 1 'FILE: file size N is not a multiple of the row size S (KIND, dim D)' \
	    'part.fvecs: file size 73 is not a multiple of the row size 68 (fvecs, dim 16)' \
	    "$prog" "${ARGS[@]}"
	with_file dims.fvecs "$@"
	expect 1 'FILE: row R has dimension D, expected E (KIND)' \
	    'dims.fvecs: row 1 has dimension 3, expected 16 (fvecs)' \
	    "$prog" "${ARGS[@]}"
	with_file nan.bin "$@"
	expect 1 'FILE: row R, column C: value is NaN or infinite' \
	    'nan.bin: row 17, column 0: value is NaN or infinite' \
	    "$prog" "${ARGS[@]}"
	with_file be.npy "$@"
	expect 1 "FILE: npy dtype 'NAME' is not supported (expected <f4, <f2, <f8, <i4 or |u1)" \
	    "be.npy: npy dtype '>f4' is not supported (expected <f4, <f2, <f8, <i4 or |u1)" \
	    "$prog" "${ARGS[@]}"
	with_file cut.zst "$@"
	expect 1 'FILE: truncated zstd stream' 'cut.zst: truncated zstd stream' \
	    "$prog" "${ARGS[@]}"
	with_file t-fields.txt "$@"
	expect 1 'FILE: line L: N values, expected D' \
	    't-fields.txt: line 2: 15 values, expected 16' "$prog" "${ARGS[@]}"
	with_file t-word.txt "$@"
	expect 1 "FILE: line L, column C: not a number: 'ARG'" \
	    "t-word.txt: line 2, column 5: not a number: 'x'" "$prog" "${ARGS[@]}"
	with_file t-nan.txt "$@"
	expect 1 'FILE: line L, column C: value is NaN or infinite' \
	    't-nan.txt: line 2, column 3: value is NaN or infinite' \
	    "$prog" "${ARGS[@]}"
	with_file t-blank.txt "$@"
	expect 1 'FILE: line L: blank line' 't-blank.txt: line 2: blank line' \
	    "$prog" "${ARGS[@]}"
	with_file t-long.txt "$@"
	expect 1 'FILE: line L: longer than 1048576 bytes' \
	    't-long.txt: line 2: longer than 1048576 bytes' "$prog" "${ARGS[@]}"
	with_file t-fewer.vec "$@"
	expect 1 'FILE: truncated: expected N rows, got R' \
	    't-fewer.vec: truncated: expected 3 rows, got 2' "$prog" "${ARGS[@]}"
	with_file t-more.vec "$@"
	expect 1 'FILE: line L: more rows than the N the header claims' \
	    't-more.vec: line 3: more rows than the 1 the header claims' \
	    "$prog" "${ARGS[@]}"
	with_file t-cut.w2v "$@"
	expect 1 'FILE: truncated at row R of N (word2vec)' \
	    't-cut.w2v: truncated at row 2 of 3 (word2vec)' "$prog" "${ARGS[@]}"
	with_file t-word.w2v "$@"
	expect 1 'FILE: row R: word longer than 4096 bytes' \
	    't-word.w2v: row 0: word longer than 4096 bytes' "$prog" "${ARGS[@]}"
	with_file t-claims.w2v "$@"
	expect 1 'FILE: header claims N rows of dim D but the file holds M bytes' \
	    't-claims.w2v: header claims 1000 rows of dim 16 but the file holds 77 bytes' \
	    "$prog" "${ARGS[@]}"
}

# out_cases PROG ARG...: an output ({}) that cannot be written is refused
# before any work.
out_cases() {
	local prog=$1
	shift
	mkdir -p adir
	with_file no/dir/o.x "$@"
	expect 1 'FILE: cannot write there: NAME: ERROR' \
	    'no/dir/o.x: cannot write there: no/dir: No such file or directory' \
	    "$prog" "${ARGS[@]}"
	with_file adir "$@"
	expect 1 'FILE: is a directory' 'adir: is a directory' \
	    "$prog" "${ARGS[@]}"
}

# tqfile_cases PROG ARG...: the messages about a damaged tq file (index or
# quantizer) given in place of {}.
tqfile_cases() {
	local prog=$1 size version
	shift
	size=$(stat -c %s i.tqi)
	version=$(od -An -tu4 -j8 -N4 i.tqi | tr -d ' ')
	with_file c.bin "$@"
	expect 1 'FILE: not a tq file (bad magic)' \
	    'c.bin: not a tq file (bad magic)' "$prog" "${ARGS[@]}"
	with_file empty.bin "$@"
	expect 1 'FILE: empty file' 'empty.bin: empty file' "$prog" "${ARGS[@]}"
	with_file cut.tqi "$@"
	expect 1 'FILE: truncated: commit C needs N bytes, file has M' \
	    "cut.tqi: truncated: commit 1 needs $size bytes, file has 6000" \
	    "$prog" "${ARGS[@]}"
	# Quantizer files keep format version 1.
	with_file cutq.tq "$@"
	expect 1 'FILE: truncated or extended: header says N bytes, file has M' \
	    "cutq.tq: truncated or extended: header says $(stat -c %s q.tq) bytes, file has 300" \
	    "$prog" "${ARGS[@]}"
	with_file c-version-99.tqi "$@"
	expect 1 'FILE: format version V is newer than this program (W)' \
	    "c-version-99.tqi: format version 99 is newer than this program ($version)" \
	    "$prog" "${ARGS[@]}"
	with_file s-header-hash.tqi "$@"
	expect 1 'FILE: header checksum mismatch' \
	    's-header-hash.tqi: header checksum mismatch' "$prog" "${ARGS[@]}"
	with_file s-table-hash.tqi "$@"
	expect 1 'FILE: section table checksum mismatch' \
	    's-table-hash.tqi: section table checksum mismatch' "$prog" "${ARGS[@]}"
	with_file c-code-offset-past-end.tqi "$@"
	expect 1 'FILE: section TAG: offset O length L out of bounds (file S bytes)' \
	    "c-code-offset-past-end.tqi: section CODE: offset * length * out of bounds (file $size bytes)" \
	    "$prog" "${ARGS[@]}"
	with_file c-fach-overlaps-code.tqi "$@"
	expect 1 'FILE: sections TAG and TAG overlap' \
	    'c-fach-overlaps-code.tqi: sections CODE and FACH overlap' \
	    "$prog" "${ARGS[@]}"
	with_file qi-missing-cbok.tqi "$@"
	expect 1 'FILE: missing section TAG' \
	    'qi-missing-cbok.tqi: missing section CBOK' "$prog" "${ARGS[@]}"
	with_file qi-ivfc-encoding-2.tqi "$@"
	expect 1 'FILE: section IVFC: encoding E unknown (a newer tq?)' \
	    'qi-ivfc-encoding-2.tqi: section IVFC: encoding 2 unknown (a newer tq?)' \
	    "$prog" "${ARGS[@]}"
}

@test "tq-fit: every message under DIAGNOSTICS" {
	reader_cases tq-fit -i {} -o out.tq
	norm_case tq-fit -i bignorm.bin -o out.tq
	expect 1 'FILE: dimension mismatch' 'c8.bin: dimension mismatch' \
	    tq-fit -i c8.bin -d 16 -o out.tq

	expect 2 '-d or -i is required' '-d or -i is required' tq-fit -o out.tq
	expect 2 '-o is required' '-o is required' tq-fit -d 8
	expect 2 "NAME 'ARG' is not a number" "dim 'abc' is not a number" \
	    tq-fit -d abc -o out.tq
	expect 2 "NAME 'ARG' out of range LO..HI" "bits '5' out of range 1..4" \
	    tq-fit -b 5 -d 8 -o out.tq
	expect 2 "metric 'NAME' is not one of l2, ip, cosine" \
	    "metric 'hamming' is not one of l2, ip, cosine" \
	    tq-fit -m hamming -d 8 -o out.tq
	expect 2 "rotation 'NAME' is not one of auto, dense, structured, hadamard" \
	    "rotation 'sparse' is not one of auto, dense, structured, hadamard" \
	    tq-fit --rotation sparse -d 8 -o out.tq
	expect 2 "unexpected argument 'ARG'" "unexpected argument 'extra'" \
	    tq-fit -d 8 -o out.tq extra
	expect 2 '--lists needs -i corpus to fit them' \
	    '--lists needs -i corpus to fit them' tq-fit -d 8 --lists 2 -o out.tq
	expect 2 '--rotation-block needs a structured rotation' \
	    '--rotation-block needs a structured rotation' \
	    tq-fit -d 8 --rotation dense --rotation-block 4 -o out.tq
	expect 2 '--rotation-block needs a structured rotation' \
	    '--rotation-block needs a structured rotation' \
	    tq-fit -d 8 --rotation hadamard --rotation-block 4 -o out.tq
	expect 2 '--residual needs --lists' '--residual needs --lists' \
	    tq-fit -i c.bin --residual -o out.tq
	expect 1 'FILE: N lists need at least N sample rows; the data gave M' \
	    'c.bin: 400 lists need at least 400 sample rows; the data gave 300' \
	    tq-fit -i c.bin --lists 400 -o out.tq
	out_cases tq-fit -d 16 -o {}
	all_seen tq-fit
	[ ! -e out.tq ]
}

@test "tq-build: every message under DIAGNOSTICS" {
	reader_cases tq-build -q q.tq -o out.tqi {}
	norm_case tq-build -q q.tq -o out.tqi bignorm.bin
	norm_case tq-build -o out.tqi bignorm.bin
	norm_case tq-build -q q.tq --calibrate bignorm.bin -o out.tqi c.bin
	cp i.tqi before.tqi
	norm_case tq-build --append i.tqi bignorm.bin
	cmp i.tqi before.tqi
	expect 1 'FILE: dimension D does not match the quantizer (E)' \
	    'c8.bin: dimension 8 does not match the quantizer (16)' \
	    tq-build -q q.tq -o out.tqi c8.bin
	cp i.tqi a.tqi
	expect 1 'FILE: dimension D does not match the index (E)' \
	    'c8.bin: dimension 8 does not match the index (16)' \
	    tq-build --append a.tqi c8.bin
	cmp a.tqi i.tqi

	expect 1 'FILE: N ids for R rows' 'few.ids: 5 ids for 300 rows' \
	    tq-build --ids few.ids -q q.tq -o out.tqi c.bin
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq --ids <(seq 1 5) -o out.tqi c.bin
	diag tq-build 1 'FILE: the ids file has N ids but the corpus has R rows' \
	    '/dev/fd/*: the ids file has 5 ids but the corpus has 300 rows'
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq --ids <(seq 1 301) -o out.tqi c.bin
	diag tq-build 1 'FILE: the ids file has more ids than the corpus has rows (R)' \
	    '/dev/fd/*: the ids file has more ids than the corpus has rows (300)'

	expect 1 'FILE: line L: not an unsigned integer' \
	    'bad.ids: line 2: not an unsigned integer' \
	    tq-build --ids bad.ids -q q.tq -o out.tqi c.bin
	expect 1 'FILE: line L: value does not fit in 64 bits' \
	    'ovf.ids: line 1: value does not fit in 64 bits' \
	    tq-build --delete ovf.ids -o out.tqi i.tqi
	expect 1 'FILE: file size N is not a multiple of 8 (u64 ids)' \
	    's.u64: file size 5 is not a multiple of 8 (u64 ids)' \
	    tq-build --ids s.u64 -q q.tq -o out.tqi c.bin

	tqfile_cases tq-build -q {} -o out.tqi c.bin
	expect 1 'FILE: a quantizer file, not an index' \
	    'q.tq: a quantizer file, not an index' tq-build --append q.tq c.bin
	expect 1 'FILE: section TAG: checksum X, expected Y' \
	    's-payload-code.tqi: section CODE: checksum *, expected *' \
	    tq-build --compact -o out.tqi s-payload-code.tqi
	expect 1 'FILE: would delete every vector' \
	    'i.tqi: would delete every vector' \
	    tq-build --delete all.ids -o out.tqi i.tqi

	expect 1 'FILE: cannot write there: NAME: ERROR' \
	    'no/dir/x.tqi: cannot write there: no/dir: No such file or directory' \
	    tq-build -q q.tq -o no/dir/x.tqi c.bin
	mkdir -p adir
	expect 1 'FILE: is a directory' 'adir: is a directory' \
	    tq-build -q q.tq -o adir c.bin
	printf '1\n2\n3\n2\n' >dup4.ids
	head -n 4 c.bin >/dev/null
	"$PY" "$BATS_TEST_DIRNAME/tqtool.py" head c.bin c4.bin 4
	expect 1 'FILE: id I repeats: rows R and S of the ids' \
	    'dup4.ids: id 2 repeats: rows 1 and 3 of the ids' \
	    tq-build -q q.tq --ids dup4.ids -o out.tqi c4.bin
	printf '1000\n1001\n7\n1003\n' >live4.ids
	cp i.tqi up.tqi
	expect 1 'FILE: id I (row R of the ids) is already in the index' \
	    'live4.ids: id 7 (row 2 of the ids) is already in the index' \
	    tq-build --append --ids live4.ids up.tqi c4.bin
	cmp up.tqi i.tqi
	flock up.tqi sleep 5 &
	sleep 0.5
	expect 1 "FILE: another writer holds the index's lock" \
	    "up.tqi: another writer holds the index's lock" \
	    tq-build --delete few.ids --no-wait up.tqi
	kill %1 2>/dev/null || true
	wait || true
	expect 2 '--replace goes with --append and --ids' \
	    '--replace goes with --append and --ids' \
	    tq-build --delete few.ids --replace up.tqi
	expect 2 '--max-segments goes with --append' \
	    '--max-segments goes with --append' \
	    tq-build --compact --max-segments 4 up.tqi
	expect 2 '--factors goes with a build, --append or --compact' \
	    '--factors goes with a build, --append or --compact' \
	    tq-build --delete few.ids --factors f16 up.tqi
	expect 1 'FILE: not a regular file: a tq file is written beside its destination and renamed over it' \
	    '/dev/null: not a regular file: a tq file is written beside its destination and renamed over it' \
	    tq-build -q q.tq -o /dev/null c.bin
	expect 1 'FILE: cannot write a tq file to standard output' \
	    '-: cannot write a tq file to standard output' \
	    tq-build -q q.tq -o - c.bin

	expect 2 '-o is required' '-o is required' tq-build c.bin
	expect 2 'missing corpus' 'missing corpus' tq-build -o out.tqi
	expect 2 'missing index' 'missing index' tq-build --compact
	expect 2 "unexpected argument 'ARG'" "unexpected argument 'extra'" \
	    tq-build -o out.tqi c.bin extra
	expect 2 "NAME 'ARG' is not a number" "bits 'x' is not a number" \
	    tq-build -b x -o out.tqi c.bin
	expect 2 "NAME 'ARG' out of range LO..HI" \
	    "threads '2000' out of range 0..1024" \
	    tq-build --threads 2000 -o out.tqi c.bin
	expect 2 "metric 'NAME' is not one of l2, ip, cosine" \
	    "metric 'hamming' is not one of l2, ip, cosine" \
	    tq-build -m hamming -o out.tqi c.bin
	expect 2 "originals 'NAME' is not one of f32, f16, none" \
	    "originals 'f64' is not one of f32, f16, none" \
	    tq-build --originals f64 -o out.tqi c.bin
	expect 2 "factors 'NAME' is not one of f16, f32" \
	    "factors 'f8' is not one of f16, f32" \
	    tq-build --factors f8 -o out.tqi c.bin
	expect 2 '-q cannot be used with -b, -m, -s, --no-centre, --lists or --residual' \
	    '-q cannot be used with -b, -m, -s, --no-centre, --lists or --residual' \
	    tq-build -q q.tq -b 2 -o out.tqi c.bin
	expect 2 '--residual needs --lists' '--residual needs --lists' \
	    tq-build --residual -o out.tqi c.bin
	expect 2 'only one of --append, --delete, --compact and --recalibrate' \
	    'only one of --append, --delete, --compact and --recalibrate' \
	    tq-build --append --compact a.tqi
	expect 2 "--MODE keeps the index's quantizer, originals and copies: no -q, -b, -m, -s, --no-centre, --lists, --residual, --originals, --dups or --dup-ratio" \
	    "--compact keeps the index's quantizer, originals and copies: no -q, -b, -m, -s, --no-centre, --lists, --residual, --originals, --dups or --dup-ratio" \
	    tq-build --compact -q q.tq a.tqi
	expect 2 '--shard goes with a new build, not --append, --delete or --compact' \
	    '--shard goes with a new build, not --append, --delete or --compact' \
	    tq-build --compact --shard 0/2 a.tqi
	expect 2 '--shard needs -q: every shard must use the same quantizer' \
	    '--shard needs -q: every shard must use the same quantizer' \
	    tq-build --shard 0/2 -o out.tqi c.bin
	expect 2 "shard 'ARG' is not i/n" "shard '3' is not i/n" \
	    tq-build -q q.tq --shard 3 -o out.tqi c.bin
	run --separate-stderr "$TQ_BIN/tq-build" --lists 4 -o out.tqi - <c.bin
	diag tq-build 1 'FILE: --lists needs a corpus file, not standard input (or a quantizer fitted by tq-fit, with -q)' \
	    '-: --lists needs a corpus file, not standard input (or a quantizer fitted by tq-fit, with -q)'
	expect 1 'FILE: --dups needs a quantizer with lists (tq-fit --lists)' \
	    'q.tq: --dups needs a quantizer with lists (tq-fit --lists)' \
	    tq-build -q q.tq --dups 2 -o out.tqi c.bin
	expect 1 'FILE: --dups N is more than the L lists' \
	    'ivf.tq: --dups 5 is more than the 4 lists' \
	    tq-build -q ivf.tq --dups 5 -o out.tqi c.bin
	expect 1 "FILE: --dups needs codes about the centre; the quantizer's are residual (tq-fit --residual)" \
	    "rivf.tq: --dups needs codes about the centre; the quantizer's are residual (tq-fit --residual)" \
	    tq-build -q rivf.tq --dups 2 -o out.tqi c.bin
	expect 1 'FILE: --shard needs a row count known in advance (an uncompressed file or HDF5, not a pipe or zstd)' \
	    'c.bin.zst: --shard needs a row count known in advance (an uncompressed file or HDF5, not a pipe or zstd)' \
	    tq-build -q q.tq --shard 0/2 -o out.tqi c.bin.zst
	expect 1 'FILE: shard I/N is empty: R rows for N shards' \
	    'c.bin: shard 0/500 is empty: 300 rows for 500 shards' \
	    tq-build -q q.tq --shard 0/500 -o out.tqi c.bin
	expect 2 '--ids goes with --append' '--ids goes with --append' \
	    tq-build --delete few.ids --ids few.ids a.tqi

	expect 1 'FILE: --labels auto: the input has no labels' \
	    'c.bin: --labels auto: the input has no labels' \
	    tq-build -q q.tq --labels auto -o out.tqi c.bin
	expect 1 'FILE: N labels for R rows' 'few.labels: 5 labels for 300 rows' \
	    tq-build -q q.tq --labels few.labels -o out.tqi c.bin
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq --labels - \
	    -o out.tqi c.bin <few.labels
	diag tq-build 1 'FILE: the labels file has N labels but the corpus has R rows' \
	    'stdin: the labels file has 5 labels but the corpus has 300 rows'
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq --labels - \
	    -o out.tqi c.bin < <(cat all.labels all.labels)
	diag tq-build 1 'FILE: the labels file has more labels (N) than the corpus has rows (R)' \
	    'stdin: the labels file has more labels (600) than the corpus has rows (300)'
	expect 1 'FILE: line L: empty label' 'empty.labels: line 2: empty label' \
	    tq-build -q q.tq --labels empty.labels -o out.tqi c.bin
	expect 1 'FILE: line L: label longer than 4096 bytes' \
	    'long.labels: line 1: label longer than 4096 bytes' \
	    tq-build -q q.tq --labels long.labels -o out.tqi c.bin
	expect 1 'FILE: line L: NUL byte' 'nul.labels: line 2: NUL byte' \
	    tq-build -q q.tq --labels nul.labels -o out.tqi c.bin
	cp lab.tqi la.tqi
	expect 1 'FILE: the index has labels: the new rows need them too (--labels)' \
	    'la.tqi: the index has labels: the new rows need them too (--labels)' \
	    tq-build --append la.tqi c.bin
	cmp la.tqi lab.tqi
	expect 1 'FILE: the index has no labels to add to' \
	    'a.tqi: the index has no labels to add to' \
	    tq-build --append --labels all.labels a.tqi c.bin
	expect 2 '--labels goes with a build or --append' \
	    '--labels goes with a build or --append' \
	    tq-build --compact --labels all.labels a.tqi
	expect 2 '--shard cannot take a labels file (use --labels auto with a labelled corpus)' \
	    '--shard cannot take a labels file (use --labels auto with a labelled corpus)' \
	    tq-build -q q.tq --shard 0/2 --labels all.labels -o out.tqi c.bin
	# The calibration.
	expect 1 'FILE: calibration needs originals, and the index has none' \
	    'noorig.tqi: calibration needs originals, and the index has none' \
	    tq-build --recalibrate noorig.tqi
	"$TQ_BIN/tq-build" -o c8.tqi c8.bin
	expect 1 'FILE: N live rows, too few to calibrate from (at least 100)' \
	    'c8.tqi: 50 live rows, too few to calibrate from (at least 100)' \
	    tq-build --recalibrate c8.tqi
	expect 1 'FILE: calibration queries of dimension D, the index has E' \
	    'c8.bin: calibration queries of dimension 8, the index has 16' \
	    tq-build --recalibrate --calibrate c8.bin -o cal.tqi i.tqi
	expect 2 '--no-calibrate and --calibrate or --calibrate-sample: one or the other' \
	    '--no-calibrate and --calibrate or --calibrate-sample: one or the other' \
	    tq-build --no-calibrate --calibrate-sample 10 -o x.tqi c.bin
	expect 2 "--calibrate-sample samples the index's rows: not with --calibrate" \
	    "--calibrate-sample samples the index's rows: not with --calibrate" \
	    tq-build --calibrate c.bin --calibrate-sample 10 -o x.tqi c.bin
	expect 2 "--MODE keeps the index's calibration: no --calibrate, --calibrate-sample or --no-calibrate (recalibrate with --recalibrate)" \
	    "--append keeps the index's calibration: no --calibrate, --calibrate-sample or --no-calibrate (recalibrate with --recalibrate)" \
	    tq-build --append --no-calibrate i.tqi c.bin
	expect 2 '--no-calibrate goes with a build or --compact' \
	    '--no-calibrate goes with a build or --compact' \
	    tq-build --recalibrate --no-calibrate i.tqi
	[ ! -e x.tqi ] && [ ! -e cal.tqi ]
	all_seen tq-build
	cmp a.tqi i.tqi
	[ ! -e out.tqi ]
}

@test "tq-build --append, --delete, --compact: a damaged index is named, not the corpus or output" {
	local f mode
	echo 5 >gone.ids
	for f in c.bin cut.tqi q.tq c-version-99.tqi qi-missing-cbok.tqi; do
		run --separate-stderr "$TQ_BIN/tq-build" --append -o out.tqi $f c8.bin
		assert_fail1 tq-build "$f: "
		run --separate-stderr "$TQ_BIN/tq-build" --delete gone.ids -o out.tqi $f
		assert_fail1 tq-build "$f: "
		run --separate-stderr "$TQ_BIN/tq-build" --compact -o out.tqi $f
		assert_fail1 tq-build "$f: "
	done
	# And an output that cannot be written is named, not the index.
	for mode in --compact "--delete gone.ids" "--append"; do
		# shellcheck disable=SC2086
		run --separate-stderr "$TQ_BIN/tq-build" $mode -o /dev/null i.tqi \
		    $([ "$mode" = --append ] && echo c.bin)
		assert_fail1 tq-build "/dev/null: not a regular file"
	done
	[ ! -e out.tqi ]
}

@test "tq-encode: every message under DIAGNOSTICS" {
	reader_cases tq-encode -q q.tq -i {} -o out.codes
	norm_case tq-encode -q q.tq -i bignorm.bin -o out.codes
	expect 1 'FILE: dimension D does not match the quantizer (E)' \
	    'c8.bin: dimension 8 does not match the quantizer (16)' \
	    tq-encode -q q.tq -i c8.bin -o out.codes

	expect 1 'FILE: not a tq code stream (bad magic)' \
	    'c.bin: not a tq code stream (bad magic)' \
	    tq-encode --decode -q q.tq -i c.bin -o out.bin
	expect 1 'FILE: code stream version V is not supported' \
	    'v.codes: code stream version 2 is not supported' \
	    tq-encode --decode -q q.tq -i v.codes -o out.bin
	expect 1 'FILE: code stream: made by another quantizer (fingerprint differs)' \
	    'x.codes: code stream: made by another quantizer (fingerprint differs)' \
	    tq-encode --decode -q q7.tq -i x.codes -o out.bin
	expect 1 'FILE: code stream: dim D, B bits, metric M; the quantizer has dim D, B bits, metric M' \
	    'x.codes: code stream: dim 16, 4 bits, metric *; the quantizer has dim 16, 2 bits, metric *' \
	    tq-encode --decode -q q2.tq -i x.codes -o out.bin
	expect 1 'FILE: truncated code stream' 'ten.codes: truncated code stream' \
	    tq-encode --decode -q q.tq -i ten.codes -o out.bin
	expect 1 'FILE: data after the last of N records' \
	    'trail.codes: data after the last of 300 records' \
	    tq-encode --decode -q q.tq -i trail.codes -o out.bin

	tqfile_cases tq-encode -q {} -i c.bin -o out.codes

	expect 2 '-q is required' '-q is required' tq-encode -i c.bin
	expect 2 "format 'NAME' is not one of fixture, fvecs" \
	    "format 'npy' is not one of fixture, fvecs" \
	    tq-encode --decode -q q.tq --format npy
	expect 2 '--format needs --decode' '--format needs --decode' \
	    tq-encode -q q.tq --format fvecs
	expect 2 '--dataset does not apply to --decode' \
	    '--dataset does not apply to --decode' \
	    tq-encode --decode -q q.tq --dataset test
	expect 2 '--threads does not apply to --decode' \
	    '--threads does not apply to --decode' \
	    tq-encode --decode -q q.tq --threads 2
	expect 2 "unexpected argument 'ARG'" "unexpected argument 'extra'" \
	    tq-encode -q q.tq extra
	expect 1 "FILE: residual codes (each vector's about its list's centroid): only tq-build encodes with this quantizer" \
	    "rivf.tq: residual codes (each vector's about its list's centroid): only tq-build encodes with this quantizer" \
	    tq-encode -q rivf.tq -i c.bin -o out.codes
	out_cases tq-encode -q q.tq -i c.bin -o {}
	all_seen tq-encode
	[ ! -e out.codes ] && [ ! -e out.bin ]
}

@test "tq-inspect: every message under DIAGNOSTICS" {
	expect 1 'FILE: open: No such file or directory' \
	    'missing.tqi: open: No such file or directory' tq-inspect missing.tqi
	expect 1 'FILE: not a regular file' '.: not a regular file' tq-inspect .
	tqfile_cases tq-inspect {}
	expect 1 'FILE: section TAG: checksum X, expected Y' \
	    's-payload-code.tqi: section CODE: checksum *, expected *' \
	    tq-inspect --verify s-payload-code.tqi

	expect 2 'missing file' 'missing file' tq-inspect
	expect 2 "unexpected argument 'ARG'" "unexpected argument 'q.tq'" \
	    tq-inspect i.tqi q.tq
	expect 2 '--cpu takes no other option or file' \
	    '--cpu takes no other option or file' tq-inspect --cpu q.tq
	all_seen tq-inspect
}

@test "tq-search: every message under DIAGNOSTICS" {
	reader_cases tq-search -i {} -o out.tsv i.tqi
	norm_case tq-search -i bignorm.bin -o out.tsv i.tqi
	expect 1 'FILE: dimension D does not match the index (E)' \
	    'c8.bin: dimension 8 does not match the index (16)' \
	    tq-search -i c8.bin -o out.tsv i.tqi

	tqfile_cases tq-search -i c.bin -o out.tsv {}
	expect 1 'FILE: a quantizer file, not an index' \
	    'q.tq: a quantizer file, not an index' tq-search -i c.bin -o out.tsv q.tq
	expect 1 'FILE: k (K) exceeds the N vectors in the index' \
	    'i.tqi: k (301) exceeds the 300 vectors in the index' \
	    tq-search -k 301 -i c.bin -o out.tsv i.tqi
	expect 1 'FILE: --oversample needs originals, and the index has none' \
	    'noorig.tqi: --oversample needs originals, and the index has none' \
	    tq-search --oversample 2 -i c.bin -o out.tsv noorig.tqi
	expect 1 'FILE: --probes needs an index with lists (IVF); this one is flat' \
	    'i.tqi: --probes needs an index with lists (IVF); this one is flat' \
	    tq-search --probes 4 -i c.bin -o out.tsv i.tqi

	expect 1 'FILE: line L: not an unsigned integer' \
	    'bad.ids: line 2: not an unsigned integer' \
	    tq-search --allow bad.ids -i c.bin -o out.tsv i.tqi
	expect 1 'FILE: line L: value does not fit in 64 bits' \
	    'ovf.ids: line 1: value does not fit in 64 bits' \
	    tq-search --allow ovf.ids -i c.bin -o out.tsv i.tqi
	expect 1 'FILE: file size N is not a multiple of 8 (u64 ids)' \
	    's.u64: file size 5 is not a multiple of 8 (u64 ids)' \
	    tq-search --allow s.u64 -i c.bin -o out.tsv i.tqi

	expect 1 'FILE: id N does not fit in ivecs (int32)' \
	    'out.ivecs: id 214748[3-9]??? does not fit in ivecs (int32)' \
	    tq-search -k 1 --format ivecs -i one.bin -o out.ivecs big.tqi

	expect 2 'missing index' 'missing index' tq-search
	expect 2 "unexpected argument 'ARG'" "unexpected argument 'q.tq'" \
	    tq-search i.tqi q.tq
	expect 2 "NAME 'ARG' is not a number" "k 'abc' is not a number" \
	    tq-search -k abc i.tqi
	expect 2 "NAME 'ARG' out of range LO..HI" \
	    "k '0' out of range 1..1000000" tq-search -k 0 i.tqi
	expect 2 "format 'NAME' is not one of tsv, json, ivecs" \
	    "format 'xml' is not one of tsv, json, ivecs" \
	    tq-search --format xml i.tqi

	expect 1 'FILE: OPTION needs an index with labels (tq-build --labels)' \
	    'i.tqi: --labels needs an index with labels (tq-build --labels)' \
	    tq-search --labels -i c.bin -o out.tsv i.tqi
	expect 1 "FILE: unknown label 'NAME'" "lab.tqi: unknown label 'w300'" \
	    tq-search --like -o out.tsv lab.tqi w1 w300
	expect 1 'FILE: line L: empty label' 'empty.labels: line 2: empty label' \
	    tq-search --like-file empty.labels -o out.tsv lab.tqi
	expect 1 'FILE: line L: label longer than 4096 bytes' \
	    'long.labels: line 1: label longer than 4096 bytes' \
	    tq-search --like-file long.labels -o out.tsv lab.tqi
	expect 1 'FILE: line L: NUL byte' 'nul.labels: line 2: NUL byte' \
	    tq-search --like-file nul.labels -o out.tsv lab.tqi
	expect 1 'FILE: no labels' 'none.labels: no labels' \
	    tq-search --like-file none.labels -o out.tsv lab.tqi
	expect 2 '--like and --like-file: one or the other' \
	    '--like and --like-file: one or the other' \
	    tq-search --like --like-file all.labels lab.tqi w1
	expect 2 '--like and --like-file take the queries from the index: no -i' \
	    '--like and --like-file take the queries from the index: no -i' \
	    tq-search --like -i c.bin lab.tqi w1
	expect 2 '--include-self goes with --like or --like-file' \
	    '--include-self goes with --like or --like-file' \
	    tq-search --include-self -i c.bin lab.tqi
	expect 2 '--like needs at least one label after the index' \
	    '--like needs at least one label after the index' \
	    tq-search --like lab.tqi
	expect 2 'an empty label' 'an empty label' tq-search --like lab.tqi w1 ''
	expect 2 "--stats takes no value or =batch, not 'ARG'" \
	    "--stats takes no value or =batch, not 'all'" \
	    tq-search --stats=all i.tqi
	expect 1 'FILE: no calibration for --recall: make one with tq-build --recalibrate (it needs originals)' \
	    'i.tqi: no calibration for --recall: make one with tq-build --recalibrate (it needs originals)' \
	    tq-search --recall 0.9 -i c.bin -o out.tsv i.tqi
	expect 2 "recall 'ARG' out of range: 0 < R <= 1" \
	    "recall '0' out of range: 0 < R <= 1" tq-search --recall 0 i.tqi
	expect 2 '--recall chooses --probes and --oversample: give one or the other' \
	    '--recall chooses --probes and --oversample: give one or the other' \
	    tq-search --recall 0.9 --oversample 2 i.tqi
	expect 2 '--recall goes with k-nearest searches, not --radius' \
	    '--recall goes with k-nearest searches, not --radius' \
	    tq-search --recall 0.9 --radius 1 i.tqi
	out_cases tq-search -i c.bin -o {} i.tqi
	all_seen tq-search
	[ ! -e out.tsv ] && [ ! -e out.ivecs ]
}

@test "tq-recall: every message under DIAGNOSTICS" {
	local long
	reader_cases tq-recall --truth -k 1 -o out.ivecs c.bin {}
	norm_case tq-recall --truth -k 1 -o out.ivecs c.bin bignorm.bin
	norm_case tq-recall --truth -k 1 -o out.ivecs bignorm.bin c.bin
	norm_case tq-recall --corpus c.bin --queries bignorm.bin
	expect 1 'FILE: dimension D does not match the corpus (E)' \
	    'c.bin: dimension 16 does not match the corpus (8)' \
	    tq-recall --truth -k 4 -o out.ivecs c8.bin c.bin
	expect 1 'FILE: k (K) exceeds the N vectors in the corpus' \
	    'c.bin: k (301) exceeds the 300 vectors in the corpus' \
	    tq-recall --truth -k 301 -o out.ivecs c.bin c.bin

	expect 1 'FILE: KIND input holds floats, not integers' \
	    'c.bin: fixture input holds floats, not integers' \
	    tq-recall c.bin t2.ivecs
	expect 1 'FILE: N rows but FILE has M' 't1.ivecs: 1 rows but t2.ivecs has 2' \
	    tq-recall t1.ivecs t2.ivecs

	expect 2 '-o is required with --truth' '-o is required with --truth' \
	    tq-recall --truth c.bin c.bin
	expect 2 'missing corpus or queries' 'missing corpus or queries' \
	    tq-recall --truth -o out.ivecs c.bin
	expect 2 'missing results or truth' 'missing results or truth' \
	    tq-recall t1.ivecs
	expect 2 "unexpected argument 'ARG'" "unexpected argument 'c.bin'" \
	    tq-recall t1.ivecs t2.ivecs c.bin
	expect 2 "NAME 'ARG' is not a number" "k 'x' is not a number" \
	    tq-recall --truth -k x -o out.ivecs c.bin c.bin
	expect 2 "NAME 'ARG' out of range LO..HI" "k '0' out of range 1..1000000" \
	    tq-recall --truth -k 0 -o out.ivecs c.bin c.bin
	expect 2 "metric 'NAME' is not one of l2, ip, cosine" \
	    "metric 'hamming' is not one of l2, ip, cosine" \
	    tq-recall --truth -m hamming -o out.ivecs c.bin c.bin
	expect 2 'more than N oversample values' 'more than 16 oversample values' \
	    tq-recall --oversample 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 \
	    --corpus c.bin --queries c.bin
	long=$(printf '1,%.0s' $(seq 200))1
	expect 2 "oversample list 'LIST' too long" "oversample list '$long' too long" \
	    tq-recall --oversample "$long" --corpus c.bin --queries c.bin
	expect 2 'OPTION does not apply to MODE' '-k does not apply to a comparison' \
	    tq-recall -k 3 t1.ivecs t2.ivecs
	expect 2 '--hdf5 cannot be used with --corpus or --queries' \
	    '--hdf5 cannot be used with --corpus or --queries' \
	    tq-recall --hdf5 x.h5 --corpus c.bin --queries c.bin
	expect 2 '--corpus and --queries go together' \
	    '--corpus and --queries go together' tq-recall --corpus c.bin
	expect 2 'more than N probes values' 'more than 16 probes values' \
	    tq-recall --probes 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 \
	    --lists 4 --corpus c.bin --queries c.bin
	expect 2 "probes list 'LIST' too long" "probes list '$long' too long" \
	    tq-recall --probes "$long" --lists 4 --corpus c.bin --queries c.bin
	expect 2 '--probes needs --lists' '--probes needs --lists' \
	    tq-recall --probes 2 --corpus c.bin --queries c.bin
	expect 2 '--residual needs --lists' '--residual needs --lists' \
	    tq-recall --residual --corpus c.bin --queries c.bin
	expect 2 "--sweep takes probes=LIST or oversample=LIST, not 'ARG'" \
	    "--sweep takes probes=LIST or oversample=LIST, not 'k=1'" \
	    tq-recall --sweep k=1 --corpus c.bin --queries c.bin
	expect 2 'more than N bits values' 'more than 4 bits values' \
	    tq-recall -b 1,2,3,4,1 --corpus c.bin --queries c.bin
	expect 2 "bits list 'LIST' too long" "bits list '$long' too long" \
	    tq-recall -b "$long" --corpus c.bin --queries c.bin

	# --plot and --peers.
	printf '{"system":"a","recall":0.5,"p50_ms":1}\n\n[1]\n' >syntax.jsonl
	printf '{"system":"a","p50_ms":1}\n' >missing.jsonl
	printf '{"system":"a","system":"b"}\n' >dup.jsonl
	printf '{"system":1}\n' >str.jsonl
	printf '{"system":"a","recall":"0.5"}\n' >num.jsonl
	printf '{"system":"","recall":0.5,"p50_ms":1}\n' >empty.jsonl
	printf '{"system":"a","recall":1.5,"p50_ms":1}\n' >recall.jsonl
	printf '{"system":"a","recall":0.5,"p50_ms":0}\n' >p50.jsonl
	for i in $(seq 17); do
		printf '{"system":"s%d","recall":0.5,"p50_ms":1}\n' "$i"
	done >many.jsonl
	printf '\n \n' >blank.jsonl
	expect 1 'FILE: line N: invalid JSON at column C: ERROR' \
	    "syntax.jsonl: line 3: invalid JSON at column 1: expected '{'" \
	    tq-recall --plot out.svg --peers syntax.jsonl
	expect 1 'FILE: line N: missing "NAME"' \
	    'missing.jsonl: line 1: missing "recall"' \
	    tq-recall --plot out.svg --peers missing.jsonl
	expect 1 'FILE: line N: duplicate "NAME"' \
	    'dup.jsonl: line 1: duplicate "system"' \
	    tq-recall --plot out.svg --peers dup.jsonl
	expect 1 'FILE: line N: "NAME" must be a string' \
	    'str.jsonl: line 1: "system" must be a string' \
	    tq-recall --plot out.svg --peers str.jsonl
	expect 1 'FILE: line N: "NAME" must be a number' \
	    'num.jsonl: line 1: "recall" must be a number' \
	    tq-recall --plot out.svg --peers num.jsonl
	expect 1 'FILE: line N: "system" is empty' \
	    'empty.jsonl: line 1: "system" is empty' \
	    tq-recall --plot out.svg --peers empty.jsonl
	expect 1 'FILE: line N: "recall" R out of range 0..1' \
	    'recall.jsonl: line 1: "recall" 1.5 out of range 0..1' \
	    tq-recall --plot out.svg --peers recall.jsonl
	expect 1 'FILE: line N: "p50_ms" T is not above 0' \
	    'p50.jsonl: line 1: "p50_ms" 0 is not above 0' \
	    tq-recall --plot out.svg --peers p50.jsonl
	expect 1 'FILE: line N: more than N systems' \
	    'many.jsonl: line 17: more than 16 systems' \
	    tq-recall --plot out.svg --peers many.jsonl
	expect 1 'FILE: no points' 'blank.jsonl: no points' \
	    tq-recall --plot out.svg --peers blank.jsonl
	# Before any evaluation work.
	expect 1 'FILE: line N: missing "NAME"' \
	    'missing.jsonl: line 1: missing "recall"' \
	    tq-recall --plot out.svg --peers missing.jsonl --corpus c.bin \
	    --queries c.bin
	expect 2 '--peers needs --plot' '--peers needs --plot' \
	    tq-recall --peers blank.jsonl --corpus c.bin --queries c.bin
	expect 2 '--title needs --plot' '--title needs --plot' \
	    tq-recall --title x --corpus c.bin --queries c.bin
	expect 2 '--plot needs --peers or an evaluation' \
	    '--plot needs --peers or an evaluation' tq-recall --plot out.svg
	out_cases tq-recall --truth -k 1 -o {} c.bin c.bin
	expect 1 'FILE: --corpus is read more than once: it needs a file, not a pipe or standard input' \
	    'stdin: --corpus is read more than once: it needs a file, not a pipe or standard input' \
	    tq-recall --corpus - --queries c.bin
	expect 2 "recall 'ARG' out of range: 0 < R <= 1" \
	    "recall '0' out of range: 0 < R <= 1" \
	    tq-recall --corpus c.bin --queries c.bin -k 10 --recall 0.9,0
	expect 2 "recall 'LIST': a list of at most N targets" \
	    "recall '0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8': a list of at most 16 targets" \
	    tq-recall --corpus c.bin --queries c.bin -k 10 --recall 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8
	expect 2 '--recall chooses probes and oversample: no --oversample, --probes, --sweep or --plot' \
	    '--recall chooses probes and oversample: no --oversample, --probes, --sweep or --plot' \
	    tq-recall --corpus c.bin --queries c.bin -k 10 --recall 0.9 --sweep probes=2
	expect 2 '--recall needs -k 1, 10 or 100' '--recall needs -k 1, 10 or 100' \
	    tq-recall --corpus c.bin --queries c.bin -k 5 --recall 0.9
	expect 2 "NAME 'ARG' out of range LO..HI" \
	    "oversample auto:z '0.1' out of range 0.5..10" \
	    tq-recall --corpus c.bin --queries c.bin --oversample 1,auto:0.1
	expect 2 "NAME 'ARG' is not a number" "oversample 'autox' is not a number" \
	    tq-recall --corpus c.bin --queries c.bin --sweep oversample=autox,4
	all_seen tq-recall
	[ ! -e out.ivecs ] && [ ! -e out.svg ]
	! ls .out.svg.tmp.* 2>/dev/null
}

@test "diag_glob: placeholders match values, the rest matches itself" {
	local g
	g=$(diag_glob "FILE: k (K) exceeds the N vectors in the index")
	[[ "a.tqi: k (11) exceeds the 10 vectors in the index" == $g ]]
	[[ "a.tqi: k (11) exceeds 10 vectors in the index" != $g ]]
	g=$(diag_glob "NAME 'ARG' out of range LO..HI")
	[[ "k '0' out of range 1..1000000" == $g ]]
	[[ "k 0 out of range 1..1000000" != $g ]]
	g=$(diag_glob "FILE: row R, column C: value is NaN or infinite")
	[[ "x: row 1, column 0: value is NaN or infinite" == $g ]]
	[[ "x: row 1, column 0: value is nan or infinite" != $g ]]
	g=$(diag_glob "not in [-1, 1]?")
	[[ "not in [-1, 1]?" == $g ]]
	[[ "not in -1?" != $g ]]
}

@test "tq-cat: every message under DIAGNOSTICS" {
	reader_cases tq-cat -o out.bin {}
	expect 1 "FILE: dimension D does not match the first input's (E)" \
	    "c8.bin: dimension 8 does not match the first input's (16)" \
	    tq-cat -o out.bin c.bin c8.bin
	expect 1 'FILE: row R, column C: value V is not an int32' \
	    'out.ivecs: row 0, column 0: value * is not an int32' \
	    tq-cat -o out.ivecs c.bin
	expect 1 'FILE: row R, column C: value V is not a byte (0..255)' \
	    'out.bvecs: row 0, column 0: value * is not a byte (0..255)' \
	    tq-cat -o out.bvecs c.bin
	# The HDF5 library is loaded when an HDF5 file is met.
	printf '\211HDF\r\n\032\n%s' 0123456789abcdef >sig.h5
	TQ_HDF5_LIB=/nonexistent/libhdf5.so expect 1 \
	    'FILE: reading HDF5 needs the HDF5 library: ERROR' \
	    'sig.h5: reading HDF5 needs the HDF5 library: /nonexistent/libhdf5.so: cannot open shared object file: No such file or directory' \
	    tq-cat -o out.bin sig.h5
	TQ_HDF5_LIB=libzstd.so.1 expect 1 \
	    'FILE: reading HDF5 needs the HDF5 library: ERROR' \
	    'sig.h5: reading HDF5 needs the HDF5 library: libzstd.so.1 has no H5open' \
	    tq-cat -o out.bin sig.h5

	expect 2 "format 'NAME' is not one of fixture, fvecs, ivecs, bvecs, npy, text, tsv, csv, vec, w2v" \
	    "format 'f32' is not one of fixture, fvecs, ivecs, bvecs, npy, text, tsv, csv, vec, w2v" \
	    tq-cat -f f32 c.bin
	expect 2 "rows 'ARG' is not a:b" "rows '10' is not a:b" \
	    tq-cat --rows 10 c.bin
	expect 2 "rows 'ARG': the end is before the start" \
	    "rows '20:10': the end is before the start" tq-cat --rows 20:10 c.bin
	expect 2 "rows start 'ARG' is not a number" \
	    "rows start '-5' is not a number" tq-cat --rows -5: c.bin
	expect 2 "rows end 'ARG' is not a number" \
	    "rows end '1x' is not a number" tq-cat --rows :1x c.bin
	expect 2 "sample 'ARG' is not a number" "sample 'ten' is not a number" \
	    tq-cat --sample ten c.bin
	expect 2 "sample 'ARG' out of range LO..HI" \
	    "sample '0' out of range 1..18446744073709551614" \
	    tq-cat --sample 0 c.bin
	expect 2 "seed 'ARG' is not a number" "seed '0x10' is not a number" \
	    tq-cat --sample 5 --seed 0x10 c.bin
	expect 2 '--seed needs --sample' '--seed needs --sample' \
	    tq-cat --seed 5 c.bin
	expect 2 '--labels needs a text output format (text, tsv, csv, vec, w2v)' \
	    '--labels needs a text output format (text, tsv, csv, vec, w2v)' \
	    tq-cat --labels -o out.npy c.bin
	out_cases tq-cat -o {} c.bin
	all_seen tq-cat
	[ ! -e out.bin ] && [ ! -e out.ivecs ] && [ ! -e out.bvecs ] &&
	    [ ! -e out.npy ]
}

@test "tq-merge: every message under DIAGNOSTICS" {
	printf '0\t1\t5\t0.5\n0\t2\t6\t0.75\n1\t1\t7\t0.25\n1\t2\t8\t1\n' >m0.tsv
	printf '0\t1\t15\t0.5\n0\t2\t16\t0.75\n1\t1\t17\t0.25\n1\t2\t18\t1\n' >m1.tsv
	printf '0\t1\t5\t0.5\n0\t2\t6\t0.75' >m-cut.tsv
	printf '0\t1\t5\t0.5\n0\t2\t6\0\t0.75\n' >m-nul.tsv
	printf '0\t1\t5\t0.5\n0\t2\tsix\t0.75\n' >m-field.tsv
	printf '{"query":0,"ids":[5,6],"scores":[0.5]}\n' >m-num.json
	printf '{"query":0,"idx":[5]}\n' >m-json.json
	printf '{"query":0,"ids":[],"scores":[]}\n' >m-none.json
	printf '0\t2\t5\t0.5\n' >m-rank1.tsv
	printf '0\t1\t5\t0.5\n0\t3\t6\t0.75\n' >m-rank.tsv
	printf '1\t1\t5\t0.5\n' >m-query.tsv
	printf '0\t1\t5\t0.75\n0\t2\t6\t0.5\n' >m-desc.tsv
	printf '0\t1\t6\t0.5\n0\t2\t5\t0.5\n' >m-ties.tsv
	printf '0\t1\t15\t0.5\n0\t2\t16\t0.75\n' >m-short.tsv
	printf '0\t1\t15\t0.5\n1\t1\t17\t0.25\n' >m-k1.tsv
	printf '0\t1\t6\t0.5\n0\t2\t9\t0.75\n1\t1\t17\t0.25\n1\t2\t18\t1\n' >m-dup.tsv
	printf '0\t1\t3000000000\t0.5\n0\t2\t16\t0.75\n' >m-big.tsv
	: >m-empty.tsv

	out_cases tq-merge -m l2 -o {} m0.tsv
	expect 1 'FILE: No such file or directory' \
	    'missing.tsv: No such file or directory' tq-merge -m l2 missing.tsv
	expect 1 'FILE: not a tq file (bad magic)' \
	    'c.bin: not a tq file (bad magic)' tq-merge -q c.bin m0.tsv
	expect 1 'FILE: line L: no newline at the end (truncated?)' \
	    'm-cut.tsv: line 2: no newline at the end (truncated?)' \
	    tq-merge -m l2 m-cut.tsv
	expect 1 'FILE: line L: holds a NUL byte' \
	    'm-nul.tsv: line 2: holds a NUL byte' tq-merge -m l2 m-nul.tsv
	expect 1 'FILE: line L: not a tq-search result (query<TAB>rank<TAB>id<TAB>score)' \
	    'm-field.tsv: line 2: not a tq-search result (query<TAB>rank<TAB>id<TAB>score)' \
	    tq-merge -m l2 m-field.tsv
	expect 1 'FILE: line L: not a tq-search JSON result ({"query":Q,"ids":[...],"scores":[...]})' \
	    'm-json.json: line 1: not a tq-search JSON result ({"query":Q,"ids":\[...\],"scores":\[...\]})' \
	    tq-merge -m l2 m-json.json
	expect 1 'FILE: line L: query Q: the ids and scores differ in number' \
	    'm-num.json: line 1: query 0: the ids and scores differ in number' \
	    tq-merge -m l2 m-num.json
	expect 1 'FILE: line L: query Q starts at rank R' \
	    'm-rank1.tsv: line 1: query 0 starts at rank 2' \
	    tq-merge -m l2 m-rank1.tsv
	expect 1 'FILE: line L: query Q: rank R where N was expected' \
	    'm-rank.tsv: line 2: query 0: rank 3 where 2 was expected' \
	    tq-merge -m l2 m-rank.tsv
	expect 1 'FILE: line L: query Q where query N was expected' \
	    'm-query.tsv: line 1: query 1 where query 0 was expected' \
	    tq-merge -m l2 m-query.tsv
	expect 1 'FILE: query Q: scores descend at rank R, but the metric ranks lower scores first' \
	    'm-desc.tsv: query 0: scores descend at rank 2, but the metric ranks lower scores first' \
	    tq-merge -m l2 m-desc.tsv
	expect 1 'FILE: query Q: scores ascend at rank R, but the metric ranks higher scores first' \
	    'm0.tsv: query 0: scores ascend at rank 2, but the metric ranks higher scores first' \
	    tq-merge -m ip m0.tsv
	expect 1 'FILE: query Q: equal scores not ordered by id at rank R' \
	    'm-ties.tsv: query 0: equal scores not ordered by id at rank 2' \
	    tq-merge -m l2 m-ties.tsv
	expect 1 'FILE: no results' 'm-empty.tsv: no results' \
	    tq-merge -m l2 m-empty.tsv
	expect 1 'FILE: query 0 has no results' 'm-none.json: query 0 has no results' \
	    tq-merge -m l2 m-none.json
	expect 1 'FILE: k (N) exceeds its M results per query' \
	    'm0.tsv: k (3) exceeds its 2 results per query' \
	    tq-merge -m l2 -k 3 m0.tsv
	expect 1 'FILE: ends after N queries, FILE has more' \
	    'm-short.tsv: ends after 1 queries, m0.tsv has more' \
	    tq-merge -m l2 m0.tsv m-short.tsv
	expect 1 'FILE: more queries than FILE (N)' \
	    'm0.tsv: more queries than m-short.tsv (1)' \
	    tq-merge -m l2 m-short.tsv m0.tsv
	expect 1 'FILE: query Q has N results, FILE has M (a different k, or a filtered search)' \
	    'm-k1.tsv: query 0 has 1 results, m0.tsv has 2 (a different k, or a filtered search)' \
	    tq-merge -m l2 m0.tsv m-k1.tsv
	expect 1 'FILE: query Q: id N is also in FILE (overlapping shards?)' \
	    'm-dup.tsv: query 0: id 6 is also in m0.tsv (overlapping shards?)' \
	    tq-merge -m l2 m0.tsv m-dup.tsv
	expect 1 'FILE: id N does not fit in ivecs (int32)' \
	    'out.ivecs: id 3000000000 does not fit in ivecs (int32)' \
	    tq-merge -m l2 --format ivecs -o out.ivecs m-big.tsv

	expect 2 'give the metric with exactly one of -m and -q' \
	    'give the metric with exactly one of -m and -q' tq-merge m0.tsv
	expect 2 'missing result files' 'missing result files' tq-merge -m l2
	expect 2 'standard input given twice' 'standard input given twice' \
	    tq-merge -m l2 - -
	expect 2 "metric 'NAME' is not one of l2, ip, cosine" \
	    "metric 'l1' is not one of l2, ip, cosine" tq-merge -m l1 m0.tsv
	expect 2 "format 'NAME' is not one of tsv, json, ivecs" \
	    "format 'csv' is not one of tsv, json, ivecs" \
	    tq-merge -m l2 --format csv m0.tsv
	expect 2 "k 'ARG' out of range LO..HI" "k '0' out of range 1..1000000" \
	    tq-merge -m l2 -k 0 m0.tsv
	all_seen tq-merge
	[ ! -e out.ivecs ]
}
