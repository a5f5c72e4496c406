#!/usr/bin/env bats
# tq-encode: code streams and their decoding.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 32 250 71 --clusters 5
	"$TQ_BIN/tq-fit" -i "$F/c.bin" -o "$F/q.tq"
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
	C=$F/c.bin
}

@test "tq-encode: stream size is 48 + n * (ceil(d*b/8) + 12)" {
	local b
	for b in 1 2 3 4; do
		"$TQ_BIN/tq-fit" -i "$C" -b $b -o q$b.tq
		run --separate-stderr "$TQ_BIN/tq-encode" -q q$b.tq -i "$C" -o codes$b
		assert_status 0
		assert_equal "$output" ""
		assert_equal "$(stat -c %s codes$b)" $((48 + 250 * ((32 * b + 7) / 8 + 12)))
	done
}

@test "tq-encode | tq-encode --decode: shape right, 4-bit error small" {
	"$TQ_BIN/tq-encode" -q "$F/q.tq" -i "$C" | "$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -o dec.bin
	assert_equal "$(tq info dec.bin)" "32 250"
	assert_equal "$(stat -c %s dec.bin)" $((8 + 250 * 32 * 4))
	err=$(tq relerr "$C" dec.bin)
	echo "relative squared error $err"
	assert_le "$err" 0.03
	# stdin and stdout throughout.
	"$TQ_BIN/tq-encode" -q "$F/q.tq" <"$C" >codes
	"$TQ_BIN/tq-encode" --decode -q "$F/q.tq" <codes >dec2.bin
	cmp dec.bin dec2.bin
	"$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i codes --format fixture -o dec3.bin
	cmp dec.bin dec3.bin
}

@test "tq-encode --decode: error shrinks as bits grow" {
	local b prev=1 err
	for b in 1 2 3 4; do
		"$TQ_BIN/tq-fit" -i "$C" -b $b -o q$b.tq
		"$TQ_BIN/tq-encode" -q q$b.tq -i "$C" -o codes
		"$TQ_BIN/tq-encode" --decode -q q$b.tq -i codes -o dec.bin
		err=$(tq relerr "$C" dec.bin)
		echo "bits $b error $err"
		assert_le "$err" "$prev"
		prev=$err
	done
}

@test "tq-encode --decode --format fvecs" {
	"$TQ_BIN/tq-encode" -q "$F/q.tq" -i "$C" -o codes
	"$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i codes -o dec.bin
	"$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i codes --format fvecs -o dec.fvecs
	assert_equal "$(stat -c %s dec.fvecs)" $((250 * (4 + 32 * 4)))
	tq tofvecs dec.bin want.fvecs
	cmp dec.fvecs want.fvecs
}

@test "tq-encode: deterministic; an index file may serve as -q" {
	"$TQ_BIN/tq-encode" -q "$F/q.tq" -i "$C" -o a
	"$TQ_BIN/tq-encode" -q "$F/q.tq" -i "$C" -o b
	cmp a b
	"$TQ_BIN/tq-build" -q "$F/q.tq" -o idx.tqi "$C"
	"$TQ_BIN/tq-encode" -q idx.tqi -i "$C" -o c
	cmp a c
}

@test "tq-encode: fvecs, npy and zstd inputs give the same stream" {
	"$TQ_BIN/tq-encode" -q "$F/q.tq" -i "$C" -o ref
	tq tofvecs "$C" c.fvecs
	tq tonpy "$C" c.npy
	zstd -q -o c.bin.zst "$C"
	for f in c.fvecs c.npy c.bin.zst; do
		"$TQ_BIN/tq-encode" -q "$F/q.tq" -i $f -o $f.codes
		cmp ref $f.codes
	done
}

@test "tq-encode --decode with another quantizer: exit 1" {
	"$TQ_BIN/tq-encode" -q "$F/q.tq" -i "$C" -o codes
	"$TQ_BIN/tq-fit" -i "$C" -s 43 -o other.tq
	run --separate-stderr "$TQ_BIN/tq-encode" --decode -q other.tq -i codes -o dec.bin
	assert_fail1 tq-encode codes
	# Same dim and seed, other bits.
	"$TQ_BIN/tq-fit" -i "$C" -b 2 -o b2.tq
	run --separate-stderr "$TQ_BIN/tq-encode" --decode -q b2.tq -i codes -o dec.bin
	assert_fail1 tq-encode codes
	# Not centred.
	"$TQ_BIN/tq-fit" -d 32 -o nc.tq
	run --separate-stderr "$TQ_BIN/tq-encode" --decode -q nc.tq -i codes -o dec.bin
	assert_fail1 tq-encode codes
	assert_only_files . codes other.tq b2.tq nc.tq
}

@test "tq-encode --decode: damaged streams: exit 1 naming the file" {
	"$TQ_BIN/tq-encode" -q "$F/q.tq" -i "$C" -o codes
	cp codes short
	truncate -s $(( $(stat -c %s codes) - 5 )) short
	run --separate-stderr "$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i short -o dec.bin
	assert_fail1 tq-encode short
	head -c 20 codes >hdr
	run --separate-stderr "$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i hdr -o dec.bin
	assert_fail1 tq-encode hdr
	: >empty
	run --separate-stderr "$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i empty -o dec.bin
	assert_fail1 tq-encode empty
	cp codes badmagic
	tq flip badmagic 0
	run --separate-stderr "$TQ_BIN/tq-encode" --decode -q "$F/q.tq" -i badmagic -o dec.bin
	assert_fail1 tq-encode badmagic
	assert_only_files . codes short hdr empty badmagic
}

@test "tq-encode: input of another dimension: exit 1 naming it" {
	mkfix c16.bin 16 10 3
	run --separate-stderr "$TQ_BIN/tq-encode" -q "$F/q.tq" -i c16.bin -o codes
	assert_fail1 tq-encode c16.bin
	assert_only_files . c16.bin
}

@test "tq-encode: NaN in the input: exit 1, no output" {
	mkfix n.bin 32 10 3 --nan 4
	run --separate-stderr "$TQ_BIN/tq-encode" -q "$F/q.tq" -i n.bin -o codes
	assert_fail1 tq-encode n.bin
	assert_only_files . n.bin
}

@test "tq-encode --threads: the same stream for any count; usage" {
	mkfix big.bin 32 5000 9 --clusters 5
	"$TQ_BIN/tq-encode" -q "$F/q.tq" --threads 1 -i big.bin -o t1
	local t
	for t in 0 2 3 7; do
		"$TQ_BIN/tq-encode" -q "$F/q.tq" --threads $t -i big.bin -o t$t
		cmp t1 t$t
	done
	run --separate-stderr "$TQ_BIN/tq-encode" --decode --threads 2 -q "$F/q.tq" -i t1
	assert_usage_error tq-encode
	run --separate-stderr "$TQ_BIN/tq-encode" --threads 1025 -q "$F/q.tq" -i big.bin
	assert_usage_error tq-encode
	run --separate-stderr "$TQ_BIN/tq-encode" --threads x -q "$F/q.tq" -i big.bin
	assert_usage_error tq-encode
}
