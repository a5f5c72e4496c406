# helpers.bash - shared by the tq CLI tests (bats-core >= 1.5).
#
# TQ_BIN names the directory of the programs (make check sets it).
# Fixtures are made by tqtool.py with /usr/bin/python3 and only the
# standard library; every test writes into its own $BATS_TEST_TMPDIR.

bats_require_minimum_version 1.5.0

: "${TQ_BIN:=$BATS_TEST_DIRNAME/../../build/bin}"
TOP="$(cd "$BATS_TEST_DIRNAME/../.." && pwd)"
PY=/usr/bin/python3
TQTOOL="$BATS_TEST_DIRNAME/tqtool.py"
FIXTURES="$TOP/fixtures"

# Under the sanitizers a report must never pass for "exit 1".
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}exitcode=86"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}exitcode=87:print_stacktrace=1"
unset TQ_ISA

tq() { "$PY" "$TQTOOL" "$@"; }

# Are the programs of $TQ_BIN a sanitizer build (make check-asan)?  Tests
# that cannot run under it, or run fewer rounds, ask this, not the path.
sanitized() { grep -q __asan_init "$TQ_BIN/tq-inspect" 2>/dev/null; }

# Enters a fresh work directory of the test.  Not $BATS_TEST_TMPDIR itself:
# bats keeps the files of `run --separate-stderr` there, and tests check
# that failed runs leave no files behind.
cd_tmp() {
	mkdir -p "$BATS_TEST_TMPDIR/work"
	cd "$BATS_TEST_TMPDIR/work"
}

# mkfix FILE DIM N [SEED] [gen options...]: a fixture file of N rows of DIM
# float32 (gaussian; --clusters C for clustered data).
mkfix() {
	local file=$1 dim=$2 n=$3 seed=${4:-1}
	shift 3
	[ $# -gt 0 ] && shift
	tq gen "$file" "$dim" "$n" "$seed" "$@"
}

# Writes raw bytes given as a printf format (e.g. '\x10\x00\x00\x00').
mkbytes() { printf "$2" >"$1"; }

# Status and stream checks that say what they saw when they fail.
show() {
	echo "status: $status" >&2
	echo "--- stdout:" >&2
	printf '%s\n' "$output" | head -40 >&2
	echo "--- stderr:" >&2
	printf '%s\n' "${stderr:-}" | head -40 >&2
}

assert_status() {
	if [ "$status" -ne "$1" ]; then
		echo "expected status $1" >&2
		show
		return 1
	fi
}

# A failure: status exactly 1, exactly one stderr line, "PROG: " first,
# containing every further argument as a fixed string.
assert_fail1() {
	local prog=$1 s
	shift
	assert_status 1 || return 1
	if [ "${#stderr_lines[@]}" -ne 1 ]; then
		echo "expected exactly one line on stderr" >&2
		show
		return 1
	fi
	case "${stderr_lines[0]}" in
	"$prog: "*) ;;
	*)	echo "stderr does not start with '$prog: '" >&2; show; return 1 ;;
	esac
	for s in "$@"; do
		case "${stderr_lines[0]}" in
		*"$s"*) ;;
		*)	echo "stderr lacks '$s'" >&2; show; return 1 ;;
		esac
	done
}

# A usage error: status 2, "PROG: ..." then the usage on stderr, nothing
# on stdout.
assert_usage_error() {
	local prog=$1
	assert_status 2 || return 1
	case "${stderr_lines[0]:-}" in
	"$prog: "*) ;;
	*)	echo "first stderr line does not start with '$prog: '" >&2; show; return 1 ;;
	esac
	case "${stderr_lines[1]:-}" in
	"usage: $prog "*) ;;
	*)	echo "second stderr line is not 'usage: $prog ...'" >&2; show; return 1 ;;
	esac
	if [ -n "$output" ]; then
		echo "usage error wrote to stdout" >&2
		show
		return 1
	fi
}

assert_equal() {
	if [ "$1" != "$2" ]; then
		printf 'expected: %s\n     got: %s\n' "$2" "$1" >&2
		return 1
	fi
}

# assert_ge A B: A >= B for decimal numbers.
assert_ge() {
	if ! awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; then
		echo "expected $1 >= $2" >&2
		return 1
	fi
}

assert_le() {
	if ! awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; then
		echo "expected $1 <= $2" >&2
		return 1
	fi
}

# The files in a directory besides the given ones (stray temporaries).
assert_only_files() {
	local dir=$1 f base extra=
	shift
	for f in "$dir"/* "$dir"/.[!.]*; do
		[ -e "$f" ] || continue
		base=${f##*/}
		case " $* " in
		*" $base "*) ;;
		*)	extra="$extra $base" ;;
		esac
	done
	if [ -n "$extra" ]; then
		echo "unexpected files in $dir:$extra" >&2
		return 1
	fi
}

# Normalised SYNOPSIS of a man page (whitespace collapsed), or nothing.
man_synopsis() {
	local page="$TOP/man/$1.1"
	[ -f "$page" ] && command -v mandoc >/dev/null || return 0
	mandoc -Tascii -Owidth=300 "$page" | sed 's/.\x08//g' |
	    awk '/^SYNOPSIS/ { on = 1; next } /^[A-Z]/ { on = 0 } on' |
	    tr -s ' \t\n' ' ' | sed 's/^ //; s/ $//'
}

# The ids 0 .. n-1 not listed in the file del, ascending, one a line.
kept_ids() {
	local n=$1 del=$2
	seq 0 $((n - 1)) | sort | comm -23 - <(sort "$del") | sort -n
}
