#!/usr/bin/env bats
# tq-recall --plot and --peers: the SVG of a small real sweep parses as
# XML, renders with rsvg-convert to a PNG of the stated size that is not
# blank, and bad peers files fail with one line and leave nothing behind.

load helpers

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	mkfix c.bin 16 600 1 --clusters 6
	mkfix q.bin 16 40 2 --clusters 6
	cat >peers.jsonl <<'EOF'
{"system":"hnswlib","setting":"ef 16","recall":0.91,"p50_ms":0.05,"ef":16}
{"system":"hnswlib","setting":"ef 64","recall":0.99,"p50_ms":0.12,"ef":64}

{"system":"exact","recall":1,"p50_ms":0.4,"note":null,"ok":true}
EOF
}

setup() {
	cd_tmp
	F=$BATS_FILE_TMPDIR
}

# svg_check FILE: well-formed XML whose root is a 960 x 600 SVG 1.1 with
# no script, no external reference and no style sheet; prints the text
# of its <text> elements, one a line.
svg_check() {
	"$PY" - "$1" <<'EOF'
import sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
r = d.documentElement
assert r.tagName == "svg", r.tagName
assert r.getAttribute("xmlns") == "http://www.w3.org/2000/svg"
assert r.getAttribute("version") == "1.1"
assert (r.getAttribute("width"), r.getAttribute("height")) == ("960", "600")
for tag in ("script", "style", "image", "use", "foreignObject", "a"):
    assert not d.getElementsByTagName(tag), tag
for e in d.getElementsByTagName("*"):
    for k in e.attributes.keys():
        assert "href" not in k and not k.startswith("on"), (e.tagName, k)
for t in d.getElementsByTagName("text"):
    ff = t.getAttribute("font-family") or t.parentNode.getAttribute("font-family")
    assert ff == "sans-serif", ff
    print("".join(n.data for n in t.childNodes if n.nodeType == n.TEXT_NODE))
EOF
}

# png_check FILE W H COLOUR...: a PNG of W x H pixels, mostly white but
# with at least 2% of its pixels drawn, holding every COLOUR (#rrggbb).
png_check() {
	"$PY" - "$@" <<'EOF'
import struct, sys, zlib
path, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = open(path, "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, hdr = 8, b"", None
while pos < len(b):
    n, t = struct.unpack(">I4s", b[pos:pos + 8])
    if t == b"IHDR":
        hdr = struct.unpack(">IIBBBBB", b[pos + 8:pos + 8 + 13])
    elif t == b"IDAT":
        idat += b[pos + 8:pos + 8 + n]
    pos += 12 + n
W, H, depth, ctype = hdr[:4]
assert (W, H) == (w, h), f"size {W} x {H}, expected {w} x {h}"
assert depth == 8 and ctype in (2, 6), (depth, ctype)
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), W * bpp
prev, px = bytearray(stride), {}
for y in range(H):
    f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = row[i - bpp] if i >= bpp else 0
        up, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: row[i] = (row[i] + a) & 255
        elif f == 2: row[i] = (row[i] + up) & 255
        elif f == 3: row[i] = (row[i] + (a + up) // 2) & 255
        elif f == 4:
            p = a + up - c
            pa, pb, pc = abs(p - a), abs(p - up), abs(p - c)
            row[i] = (row[i] + (a if pa <= pb and pa <= pc else up if pb <= pc else c)) & 255
    for x in range(W):
        k = bytes(row[x * bpp:x * bpp + 3])
        px[k] = px.get(k, 0) + 1
    prev = row
white = px.get(b"\xff\xff\xff", 0)
assert white > 0.5 * W * H, "not mostly white"
assert W * H - white > 0.02 * W * H, f"blank: {W * H - white} pixels drawn"
for c in sys.argv[4:]:
    k = bytes.fromhex(c.lstrip("#"))
    assert px.get(k, 0) >= 10, f"colour {c} not drawn"
EOF
}

@test "tq-recall --plot: an IVF sweep at 2 and 4 bits with peers, as SVG that parses and renders" {
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" \
	    --queries "$F/q.bin" -k 10 -b 2,4 --lists 8 --sweep probes=1,2,8 \
	    --oversample 1,4 --threads 1 --peers "$F/peers.jsonl" --plot p.svg
	assert_status 0
	assert_equal "$stderr" ""
	# The text report is unchanged: one block per bit width.
	[ "$(grep -c '^c.bin: 600 x 16 l2, 40 queries' <<<"$output")" = 2 ]
	assert_only_files . p.svg
	run svg_check p.svg
	assert_status 0
	for t in 'recall@10' 'p50 latency per query (ms, log)' \
	    'c.bin: 600 x 16 l2, IVF 8 lists, 40 queries, k=10' \
	    'tq 2-bit o1' 'tq 2-bit o4' 'tq 4-bit o1' 'tq 4-bit o4' hnswlib \
	    exact 'Pareto frontier'; do
		grep -qxF -- "$t" <<<"$output" || { echo "no text '$t'" >&2; show; false; }
	done
	# Every point is a marker with a tooltip: 2 x 3 x 2 runs, 3 peers;
	# visible labels read "pP oO".
	[ "$(grep -c '<title>' p.svg)" = 15 ]
	grep -q '<title>tq 4-bit o4 p8 o4: recall ' p.svg
	grep -q '<title>hnswlib ef 64: recall 0.9900, 0.12 ms</title>' p.svg
	grep -qx 'p[128] o[14]' <<<"$output"
	# The log axis is labelled in milliseconds.
	grep -qx '0.1' <<<"$output"
	rsvg-convert -o p.png p.svg
	# The first series' blue, hnswlib's orange (5th series).
	png_check p.png 960 600 '#0072b2' '#e69f00'
}

@test "tq-recall --plot: the frontier runs to more recall at more latency" {
	"$TQ_BIN/tq-recall" --corpus "$F/c.bin" --queries "$F/q.bin" -k 10 \
	    --lists 8 --sweep probes=1,2,4,8 --oversample 1,2,4 --threads 1 \
	    --plot p.svg >/dev/null
	"$PY" - p.svg <<'EOF'
import re, sys
s = open(sys.argv[1]).read()
paths = re.findall(r'<path fill="none" stroke="#444444"[^>]* d="M([^"]*)"', s)
assert len(paths) == 1, paths
pts = [tuple(map(float, p.split())) for p in paths[0].split(" L")]
assert len(pts) >= 1
for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
    assert x1 >= x0 and y1 < y0, pts	# pixels: up is more recall
EOF
}

@test "tq-recall --plot: a flat index labels points by oversampling" {
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" \
	    --queries "$F/q.bin" -k 10 --oversample 1,2,4 --json --plot p.svg
	assert_status 0
	"$PY" -c 'import json, sys; json.loads(sys.argv[1])' "$output"
	run svg_check p.svg
	assert_status 0
	grep -qx 'o4' <<<"$output"
	grep -qx 'tq 4-bit o2' <<<"$output"
	[ "$(grep -c '<title>' p.svg)" = 3 ]
}

@test "tq-recall -b 2,4 --json: one JSON object per bit width" {
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" \
	    --queries "$F/q.bin" -k 10 -b 2,4 --oversample 1 --json
	assert_status 0
	[ "${#lines[@]}" = 2 ]
	"$PY" -c '
import json, sys
a, b = (json.loads(l) for l in sys.argv[1].splitlines())
assert (a["bits"], b["bits"]) == (2, 4), (a["bits"], b["bits"])
assert a["bytes_per_vector"] < b["bytes_per_vector"]' "$output"
}

@test "tq-recall --plot --peers alone: the peers' points, -k names the axis" {
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers \
	    "$F/peers.jsonl" -k 10 --title 'peers & <friends>'
	assert_status 0
	assert_equal "$output" ""
	assert_equal "$stderr" ""
	run svg_check p.svg
	assert_status 0
	grep -qxF 'peers & <friends>' <<<"$output"
	grep -qx 'recall@10' <<<"$output"
	grep -q '&amp; &lt;friends&gt;' p.svg
	[ "$(grep -c '<title>' p.svg)" = 3 ]
	rsvg-convert -o p.png p.svg
	png_check p.png 960 600 '#0072b2'
	# "-" is standard output.
	"$TQ_BIN/tq-recall" --plot - --peers "$F/peers.jsonl" >o.svg
	svg_check o.svg | grep -qx 'peers.jsonl: recall vs p50 latency'
}

@test "tq-recall --peers: names with XML specials, controls and bad UTF-8 still give valid XML" {
	printf '{"system":"a<b>&\\"c'"'"'\\u0001","setting":"\\t\\u00e9\\ud83d\\ude00","recall":0.5,"p50_ms":1}\n' >odd.jsonl
	printf '{"system":"%s","recall":0.6,"p50_ms":2}\n' "$(printf 'x%.0s' $(seq 80))" >>odd.jsonl
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers odd.jsonl
	assert_status 0
	run svg_check p.svg
	assert_status 0
	grep -qF 'a<b>&"c'"'"'?' <<<"$output"
	# A long name is shortened in the legend.
	grep -q '^xxxxxxxxxxxxxxxxxxxxxxxxxxxxx\.\.\.$' <<<"$output"
	rsvg-convert -o p.png p.svg
	png_check p.png 960 600
}

@test "tq-recall --peers: bad files give one line, status 1, and no plot" {
	printf '{"system":"a","recall":0.5,"p50_ms":1}\n{"system":"a",}\n' >trail.jsonl
	printf '{"system":"a","recall":0.5,"p50_ms":1,"n":{"x":1}}\n' >nest.jsonl
	printf '{"system":"a\xff","recall":0.5,"p50_ms":1}\n' >utf.jsonl
	printf '{"system":"a","recall":0.5,"p50_ms":1} x\n' >after.jsonl
	printf '{"system":"a","recall":01,"p50_ms":1}\n' >num.jsonl
	printf '{"system":"a\x01","recall":0.5,"p50_ms":1}\n' >ctl.jsonl
	printf '{"system":"a","recall":0.5,"p50_ms":1\n' >open.jsonl
	printf '{"system":"a","recall":0.5,"p50_ms":1,"s":"\\ud800"}\n' >sur.jsonl
	printf 'x\0y\n' >nul.jsonl
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers trail.jsonl
	assert_fail1 tq-recall 'trail.jsonl: line 2: invalid JSON at column 15: expected a string'
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers nest.jsonl
	assert_fail1 tq-recall 'nest.jsonl: line 1: invalid JSON at column 43: nested arrays and objects are not supported'
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers utf.jsonl
	assert_fail1 tq-recall 'utf.jsonl: line 1: invalid JSON at column 13: invalid UTF-8'
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers after.jsonl
	assert_fail1 tq-recall 'after.jsonl: line 1: invalid JSON at column 40: text after the object'
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers num.jsonl
	assert_fail1 tq-recall "num.jsonl: line 1: invalid JSON at column 25: expected ',' or '}'"
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers ctl.jsonl
	assert_fail1 tq-recall 'ctl.jsonl: line 1: invalid JSON at column 13: control character in a string'
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers open.jsonl
	assert_fail1 tq-recall "open.jsonl: line 1: invalid JSON at column 38: expected ',' or '}'"
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers sur.jsonl
	assert_fail1 tq-recall 'sur.jsonl: line 1: invalid JSON at column 44: unpaired surrogate'
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers nul.jsonl
	assert_fail1 tq-recall "nul.jsonl: line 1: invalid JSON at column 1: expected '{'"
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers none.jsonl
	assert_fail1 tq-recall 'none.jsonl: open: No such file or directory'
	# An evaluation with a bad peers file fails before it starts.
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" \
	    --queries "$F/q.bin" --plot p.svg --peers trail.jsonl
	assert_fail1 tq-recall 'trail.jsonl: line 2:'
	assert_equal "$output" ""
	assert_only_files . trail.jsonl nest.jsonl utf.jsonl after.jsonl \
	    num.jsonl ctl.jsonl open.jsonl sur.jsonl nul.jsonl
	# An existing plot is left as it was.
	echo old >p.svg
	run --separate-stderr "$TQ_BIN/tq-recall" --plot p.svg --peers nest.jsonl
	assert_status 1
	assert_equal "$(cat p.svg)" old
}

@test "tq-recall --plot: a failed evaluation leaves no plot and no temporary file" {
	mkfix q8.bin 8 10 3
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" \
	    --queries q8.bin --plot p.svg
	assert_fail1 tq-recall 'dimension 8 does not match the corpus (16)'
	assert_only_files . q8.bin
	run --separate-stderr "$TQ_BIN/tq-recall" --corpus "$F/c.bin" \
	    --queries "$F/q.bin" --plot nodir/p.svg
	assert_fail1 tq-recall 'nodir/p.svg'
	assert_only_files . q8.bin
}
