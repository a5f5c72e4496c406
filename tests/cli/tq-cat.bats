#!/usr/bin/env bats
# tq-cat: conversions, concatenation, slices, samples, normalisation.

load helpers

setup_file() {
	local F=$BATS_FILE_TMPDIR
	mkfix "$F/c.bin" 16 100 5
	mkfix "$F/d.bin" 16 100 6
	mkfix "$F/nan.bin" 16 40 3 --nan 17
	# Whole numbers for ivecs (negative, large) and bvecs (0..255).
	"$PY" - "$F" <<'EOF'
import random, struct, sys
d = sys.argv[1]
rng = random.Random(9)
def fix(name, rows):
    with open(d + "/" + name, "wb") as f:
        f.write(struct.pack("<II", len(rows[0]), len(rows)))
        for r in rows:
            f.write(struct.pack("<%df" % len(r), *r))
fix("int.bin", [[float(rng.randrange(-2**24, 2**24)) for _ in range(8)] for _ in range(50)])
fix("byte.bin", [[float(rng.randrange(256)) for _ in range(8)] for _ in range(50)])
# A zero row among others, for --normalize.
fix("z.bin", [[3.0, 4.0, 0.0], [0.0, 0.0, 0.0], [1e-3, -2e-3, 5.0]])
# ivecs beyond 2^24, which floats do not hold.
with open(d + "/big.ivecs", "wb") as f:
    for v in (16777217, -2147483647, 2147483647):
        f.write(struct.pack("<i3i", 3, v, v - 1, 7))
EOF
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
	C=$F/c.bin
}

# rows FILE: the rows of a vector file as text, one a line.
rows() { "$TQ_BIN/tq-cat" -f text "$@"; }

@test "tq-cat: fixture -> fvecs, npy -> fixture is byte-identical" {
	local f
	for f in fvecs npy; do
		run --separate-stderr "$TQ_BIN/tq-cat" -o c.$f "$C"
		assert_status 0
		assert_equal "$stderr" ""
		"$TQ_BIN/tq-cat" -o back.bin c.$f
		cmp "$C" back.bin
	done
	# The files are the formats they are named for.
	tq tofvecs "$C" want.fvecs
	cmp c.fvecs want.fvecs
	tq tonpy "$C" want.npy
	cmp c.npy want.npy
	assert_equal "$(stat -c %s c.npy)" $((128 + 100 * 16 * 4))
}

# Every value of a text file read back as f32 is the fixture's, bit for bit.
text_is() {
	"$PY" - "$@" <<'EOF'
import struct, sys
fix, txt, sep = sys.argv[1], sys.argv[2], sys.argv[3]
with open(fix, "rb") as f:
    dim, n = struct.unpack("<II", f.read(8))
    want = f.read()
lines = open(txt).read().split("\n")
assert lines[-1] == "", "no final newline"
lines = lines[:-1]
assert len(lines) == n, "%d lines for %d rows" % (len(lines), n)
got = b"".join(struct.pack("<%df" % dim, *map(float, l.split(sep))) for l in lines)
assert all(len(l.split(sep)) == dim for l in lines)
assert got == want, "values differ"
EOF
}

@test "tq-cat: text, tsv and csv hold every f32 exactly" {
	"$TQ_BIN/tq-cat" -o c.txt "$C"
	text_is "$C" c.txt ' '
	"$TQ_BIN/tq-cat" -o c.tsv "$C"
	text_is "$C" c.tsv $'\t'
	"$TQ_BIN/tq-cat" -o c.csv "$C"
	text_is "$C" c.csv ,
	# Awkward values: zeros, extremes, subnormals.
	"$PY" -c 'import struct, sys; v = [0.0, -0.0, 1.0, 3.4028234663852886e38, -1.1754943508222875e-38, 1.401298464324817e-45, 0.1, 16777217.0]; sys.stdout.buffer.write(struct.pack("<II", 8, 1) + struct.pack("<8f", *v))' >odd.bin
	"$TQ_BIN/tq-cat" -o odd.txt odd.bin
	assert_equal "$(cat odd.txt)" "0 -0 1 3.40282347e+38 -1.17549435e-38 1.40129846e-45 0.100000001 16777216"
	text_is odd.bin odd.txt ' '
}

@test "tq-cat: text, tsv and csv read back to the same fixture" {
	local f
	"$TQ_BIN/tq-cat" -o c.txt "$C"
	run --separate-stderr "$TQ_BIN/tq-cat" -o back.bin c.txt
	[ "$status" -eq 0 ] || skip "no text reader in this build ($stderr)"
	for f in txt tsv csv; do
		"$TQ_BIN/tq-cat" -o c.$f "$C"
		"$TQ_BIN/tq-cat" -o back.bin c.$f
		cmp "$C" back.bin
	done
	# Text to text is the same text.
	"$TQ_BIN/tq-cat" -o again.txt c.tsv
	cmp c.txt again.txt
}

@test "tq-cat: ivecs and bvecs round-trip whole numbers" {
	"$TQ_BIN/tq-cat" -o i.ivecs "$F/int.bin"
	assert_equal "$(stat -c %s i.ivecs)" $((50 * (4 + 8 * 4)))
	"$TQ_BIN/tq-cat" -o back.bin i.ivecs
	cmp "$F/int.bin" back.bin
	"$TQ_BIN/tq-cat" -o b.bvecs "$F/byte.bin"
	assert_equal "$(stat -c %s b.bvecs)" $((50 * (4 + 8)))
	"$TQ_BIN/tq-cat" -o back.bin b.bvecs
	cmp "$F/byte.bin" back.bin
	# bvecs -> ivecs -> npy -> fixture.
	"$TQ_BIN/tq-cat" -o b.ivecs b.bvecs
	"$TQ_BIN/tq-cat" -o b.npy b.ivecs
	"$TQ_BIN/tq-cat" -o back.bin b.npy
	cmp "$F/byte.bin" back.bin
	# ivecs to ivecs keeps int32 values that floats would round.
	"$TQ_BIN/tq-cat" -o big.ivecs "$F/big.ivecs"
	cmp "$F/big.ivecs" big.ivecs
	"$TQ_BIN/tq-cat" --rows 1:2 -o mid.ivecs "$F/big.ivecs"
	cmp <(head -c 32 "$F/big.ivecs" | tail -c 16) mid.ivecs
}

@test "tq-cat: the format follows the -o suffix; -f overrides; stdout is a fixture" {
	"$TQ_BIN/tq-cat" -o out.data "$C"
	cmp "$C" out.data
	"$TQ_BIN/tq-cat" "$C" >out.stdout
	cmp "$C" out.stdout
	"$TQ_BIN/tq-cat" -f fvecs -o out.npy "$C"
	assert_equal "$(stat -c %s out.npy)" $((100 * (4 + 16 * 4)))
	"$TQ_BIN/tq-cat" -f npy "$C" >n.out
	tq tonpy "$C" want.npy
	cmp want.npy n.out
	"$TQ_BIN/tq-cat" --format text -o t.fvecs "$C"
	assert_equal "$(wc -l <t.fvecs)" 100
}

@test "tq-cat: stdin, pipes, process substitution and zstd read alike" {
	"$TQ_BIN/tq-cat" -o want.txt "$C"
	"$TQ_BIN/tq-cat" -f text <"$C" >a.txt
	cmp want.txt a.txt
	cat "$C" | "$TQ_BIN/tq-cat" -f text - >b.txt
	cmp want.txt b.txt
	"$TQ_BIN/tq-cat" -f text <(cat "$C") >c.txt
	cmp want.txt c.txt
	zstd -q -o c.bin.zst "$C"
	"$TQ_BIN/tq-cat" -o d.txt c.bin.zst
	cmp want.txt d.txt
	# A count not known in advance: patched in a file, spooled on a pipe.
	cat "$C" | "$TQ_BIN/tq-cat" -o e.npy
	"$TQ_BIN/tq-cat" -o want.npy "$C"
	cmp want.npy e.npy
	cat "$C" | "$TQ_BIN/tq-cat" -f npy | cat >f.npy
	cmp want.npy f.npy
	cat "$C" | "$TQ_BIN/tq-cat" | cat >g.bin
	cmp "$C" g.bin
}

@test "tq-cat: several inputs are concatenated in order" {
	"$TQ_BIN/tq-cat" -o cd.bin "$C" "$F/d.bin"
	assert_equal "$(tq info cd.bin)" "16 200"
	cmp <(rows "$C" "$F/d.bin") <(rows "$C"; rows "$F/d.bin")
	# Mixed formats and streams.
	"$TQ_BIN/tq-cat" -o d.fvecs "$F/d.bin"
	cat "$C" | "$TQ_BIN/tq-cat" -o mix.bin - d.fvecs
	cmp cd.bin mix.bin
}

@test "tq-cat --rows: slices like Python, seekable or streamed" {
	local r
	rows "$C" >all.txt
	cmp <(rows --rows 10:20 "$C") <(sed -n '11,20p' all.txt)
	cmp <(rows --rows :5 "$C") <(head -5 all.txt)
	cmp <(rows --rows 5: "$C") <(tail -n +6 all.txt)
	cmp <(rows --rows : "$C") all.txt
	# Past the end: cut at the end, or nothing.
	cmp <(rows --rows 95:200 "$C") <(tail -5 all.txt)
	assert_equal "$(rows --rows 200: "$C" | wc -c)" 0
	assert_equal "$(rows --rows 7:7 "$C" | wc -c)" 0
	# An empty slice is a valid file of no rows.
	"$TQ_BIN/tq-cat" --rows 7:7 -o empty.bin "$C"
	assert_equal "$(tq info empty.bin)" "16 0"
	"$TQ_BIN/tq-cat" --rows 100: -o empty.npy "$C"
	assert_equal "$(stat -c %s empty.npy)" 128
	# The same bytes from a pipe, a zstd file and a file.
	zstd -q -o c.zst "$C"
	for r in 10:20 :5 5: 95:200 200: 0:1; do
		"$TQ_BIN/tq-cat" --rows $r -o file.bin "$C"
		cat "$C" | "$TQ_BIN/tq-cat" --rows $r -o pipe.bin
		"$TQ_BIN/tq-cat" --rows $r -o zst.bin c.zst
		cmp file.bin pipe.bin
		cmp file.bin zst.bin
	done
	# Across the boundary of two inputs.
	cmp <(rows --rows 95:105 "$C" "$F/d.bin") \
	    <(tail -5 all.txt; rows --rows :5 "$F/d.bin")
}

@test "tq-cat --rows: seeks over rows of a file, stops reading at the end" {
	local N=$F/nan.bin
	# Row 17 is NaN: skipped by a seek, read (and refused) from a pipe.
	run --separate-stderr "$TQ_BIN/tq-cat" --rows 20: -o a.bin "$N"
	assert_status 0
	assert_equal "$(tq info a.bin)" "16 20"
	run --separate-stderr sh -c '"$1" --rows 20: -o b.bin <"$2"' - "$TQ_BIN/tq-cat" <(cat "$N")
	assert_fail1 tq-cat "stdin: row 17, column 0: value is NaN or infinite"
	[ ! -e b.bin ]
	# Rows after the range, and later inputs, are not read.
	run --separate-stderr "$TQ_BIN/tq-cat" --rows :10 -o c.bin "$N"
	assert_status 0
	run --separate-stderr "$TQ_BIN/tq-cat" --rows :110 -o c.bin "$C" "$N"
	assert_status 0
	assert_equal "$(tq info c.bin)" "16 110"
	run --separate-stderr "$TQ_BIN/tq-cat" --rows :120 -o d.bin "$C" "$N"
	assert_fail1 tq-cat "$N: row 17, column 0: value is NaN or infinite"
	[ ! -e d.bin ]
}

# The sample the man page specifies, computed independently: the labels
# (row numbers) of n of the rows [a, b) of a sequence of `total` rows.
# Mode S (count known) or R (reservoir).
ref_sample() {
	"$PY" - "$@" <<'EOF'
import sys
mode, n, seed, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
M = 2**64
x = seed
def nxt():
    global x
    x = (x + 0x9e3779b97f4a7c15) % M
    z = x
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) % M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) % M
    return z ^ (z >> 31)
def below(m):
    t = (M - m) % m
    while True:
        z = nxt()
        if z >= t:
            return z % m
N = b - a
out = []
if mode == "S":
    for t in range(N):
        if len(out) == n:
            break
        if below(N - t) < n - len(out):
            out.append(a + t)
else:
    res = []
    for t in range(N):
        if t < n:
            res.append(a + t)
        else:
            j = below(t + 1)
            if j < n:
                res[j] = a + t
    out = sorted(res)
print("\n".join(map(str, out)))
EOF
}

labels_of() { "$TQ_BIN/tq-cat" --labels -f text "$@" | cut -d' ' -f1; }

@test "tq-cat --sample: the rows the man page's PRNG and algorithms choose" {
	# Count known: Algorithm S.  A pipe: Algorithm R.
	assert_equal "$(labels_of --sample 10 --seed 42 "$C")" "$(ref_sample S 10 42 0 100)"
	assert_equal "$(cat "$C" | labels_of --sample 10 --seed 42)" "$(ref_sample R 10 42 0 100)"
	assert_equal "$(labels_of --sample 7 "$C" "$F/d.bin")" "$(ref_sample S 7 0 0 200)"
	assert_equal "$(labels_of --sample 7 --seed 3 --rows 50:150 "$C" "$F/d.bin")" \
	    "$(ref_sample S 7 3 50 150)"
	assert_equal "$(labels_of --sample 7 --seed 3 --rows 50:150 <(cat "$C") <(cat "$F/d.bin"))" \
	    "$(ref_sample R 7 3 50 150)"
	assert_equal "$(labels_of --sample 30 --seed 18446744073709551615 "$C")" \
	    "$(ref_sample S 30 18446744073709551615 0 100)"
}

@test "tq-cat --sample: same seed same rows, another seed others, in order" {
	local a b input
	# A file (Algorithm S) and a pipe (Algorithm R).
	for input in "$C" "<(cat $C)"; do
		a=$(eval labels_of --sample 20 --seed 1 "$input")
		b=$(eval labels_of --sample 20 --seed 1 "$input")
		assert_equal "$a" "$b"
		b=$(eval labels_of --sample 20 --seed 2 "$input")
		[ "$a" != "$b" ]
		assert_equal "$(printf '%s\n' "$a" | wc -l)" 20
		assert_equal "$a" "$(printf '%s\n' "$a" | sort -n -u)"
	done
	# The rows are the input's rows, with their values.
	"$TQ_BIN/tq-cat" --sample 20 --seed 1 -o s.bin "$C"
	assert_equal "$(tq info s.bin)" "16 20"
	cmp <(rows s.bin) <(rows "$C" | sed -n "$(labels_of --sample 20 --seed 1 "$C" | awk '{ printf "%dp;", $1 + 1 }')")
	# n at least the rows: all of them, from a file or a pipe.
	"$TQ_BIN/tq-cat" --sample 100 -o all.bin "$C"
	cmp "$C" all.bin
	cat "$C" | "$TQ_BIN/tq-cat" --sample 1000 -o all2.bin
	cmp "$C" all2.bin
}

@test "tq-cat --normalize: unit rows, zero rows stay zero" {
	run --separate-stderr "$TQ_BIN/tq-cat" --normalize -f text "$C"
	assert_status 0
	printf '%s\n' "$output" |
	    awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i * $i;
		if (s < 0.999999 || s > 1.000001) { print "row " NR ": " s; bad = 1 } }
		END { exit bad }'
	assert_equal "$(rows --normalize "$F/z.bin" | sed -n '1,2p')" "$(printf '0.600000024 0.800000012 0\n0 0 0')"
	# The same as the cosine metric's normalisation in every format.
	"$TQ_BIN/tq-cat" --normalize -o n.npy "$C"
	cmp <(rows n.npy) <(rows --normalize "$C")
}

@test "tq-cat --labels: row numbers of the whole sequence, in tsv and csv too" {
	assert_equal "$(labels_of --rows 98:102 "$C" "$F/d.bin" | tr '\n' ' ')" "98 99 100 101 "
	"$TQ_BIN/tq-cat" --labels --rows 3:4 -f tsv -o l.tsv "$C"
	assert_equal "$(cut -f 1 l.tsv)" 3
	assert_equal "$(cut -f 2- l.tsv)" "$(rows --rows 3:4 "$C" | tr ' ' '\t')"
	"$TQ_BIN/tq-cat" --labels --rows 3:4 -o l.csv "$C"
	assert_equal "$(cut -d, -f 2- l.csv)" "$(rows --rows 3:4 "$C" | tr ' ' ',')"
}

@test "tq-cat: a failure leaves the old output and no temporary file" {
	echo old >out.bin
	run --separate-stderr "$TQ_BIN/tq-cat" -o out.bin "$C" "$F/nan.bin"
	assert_fail1 tq-cat "$F/nan.bin: row 17, column 0: value is NaN or infinite"
	assert_equal "$(cat out.bin)" old
	assert_only_files . out.bin
	run --separate-stderr "$TQ_BIN/tq-cat" -o out.ivecs "$C"
	assert_fail1 tq-cat "out.ivecs: row 0, column 0: value " " is not an int32"
	run --separate-stderr "$TQ_BIN/tq-cat" -o out.bvecs "$C"
	assert_fail1 tq-cat "out.bvecs: row 0, column 0: value " " is not a byte (0..255)"
	assert_only_files . out.bin
	# Nothing is created when an input is missing or of another dimension.
	run --separate-stderr "$TQ_BIN/tq-cat" -o new.bin "$C" missing.bin
	assert_fail1 tq-cat "missing.bin: open: No such file or directory"
	run --separate-stderr "$TQ_BIN/tq-cat" -o new.bin "$C" "$F/z.bin"
	assert_fail1 tq-cat "$F/z.bin: dimension 3 does not match the first input's (16)"
	assert_only_files . out.bin
}

@test "tq-cat --help: the usage, then a line for each option" {
	local opt
	run --separate-stderr "$TQ_BIN/tq-cat" --help
	assert_status 0
	for opt in --dataset --format --help --labels --normalize -o --rows \
	    --sample --seed --version; do
		printf '%s\n' "$output" | grep -q -- "^  .*$opt " ||
		    { echo "no line for $opt" >&2; false; }
	done
}

@test "tq-cat: slices and samples across read chunks (1024 rows of dim 1024)" {
	# Zero rows: only the labels, the row numbers, tell them apart.
	"$PY" -c 'import struct, sys; sys.stdout.buffer.write(struct.pack("<II", 1024, 2500) + bytes(1024 * 2500 * 4))' >z.bin
	assert_equal "$(labels_of --rows 1000:2100 <(cat z.bin) | tr '\n' ' ')" "$(seq 1000 2099 | tr '\n' ' ')"
	assert_equal "$(labels_of --rows 1000:2100 z.bin | tr '\n' ' ')" "$(seq 1000 2099 | tr '\n' ' ')"
	assert_equal "$(labels_of --sample 600 --seed 9 z.bin)" "$(ref_sample S 600 9 0 2500)"
	assert_equal "$(labels_of --sample 600 --seed 9 <(cat z.bin))" "$(ref_sample R 600 9 0 2500)"
	assert_equal "$(labels_of --sample 600 --seed 9 --rows 700: <(cat z.bin))" \
	    "$(ref_sample R 600 9 700 2500)"
}
