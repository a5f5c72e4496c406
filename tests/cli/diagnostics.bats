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

	# Damaged tq files.
	head -c 3000 i.tqi >cut.tqi
	"$PY" "$MAL/make-index-cases" i.tqi q.tq cases >/dev/null
	for c in c-version-99 s-header-hash s-table-hash c-code-offset-past-end \
	    c-fact-overlaps-code qi-missing-cbok s-payload-code; do
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

@test "tq-build --append, --delete, --compact: a damaged index is named, not the corpus or output" {
	local f
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
