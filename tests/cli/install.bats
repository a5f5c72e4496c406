#!/usr/bin/env bats
# make install into a temporary DESTDIR, then examples/nearest.c compiled
# through the installed libtq.pc, once against libtq.a and once against
# libtq.so, and the symbols libtq.so exports.

load helpers

PREFIX=/opt/tq

# The build directory of $TQ_BIN, relative to the top when inside it (the
# Makefile links bin/ to ../$(BUILD)).
build_dir() {
	local b

	b=$(cd "${TQ_BIN%/bin}" && pwd)
	echo "${b#"$TOP"/}"
}

setup_file() {
	local build

	build=$(build_dir)
	export D="$BATS_FILE_TMPDIR/dest"
	export LIB="$D$PREFIX/lib"
	# A sanitizer build's libraries need its runtime in every program
	# that links them; the example is compiled without it.
	if nm "$TOP/$build/lib/libtq.a" 2>/dev/null | grep -q __asan_; then
		export SKIP_INSTALL="sanitizer build"
		return
	fi
	# Run by "make check", but not one of its sub-makes: no jobserver.
	MAKEFLAGS= make -C "$TOP" -s --no-print-directory BUILD="$build" \
	    DESTDIR="$D" PREFIX="$PREFIX" install >/dev/null
	# pkg-config puts the sysroot before every -I and -L, the system
	# libraries' too; the sysroot's /usr is this machine's.
	ln -s /usr "$D/usr"
}

setup() {
	[ -z "${SKIP_INSTALL:-}" ] || skip "$SKIP_INSTALL"
	export PKG_CONFIG_PATH="$LIB/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D"
}

# The functions lib/tq.h declares, sorted.
header_functions() {
	cc -E -P "$TOP/lib/tq.h" | grep -oE '\btq_[a-z0-9_]+ *\(' |
	    tr -d ' (' | LC_ALL=C sort -u
}

@test "install: programs, libraries and links, header, libtq.pc, manuals, completions" {
	local f p
	for p in tq-fit tq-encode tq-build tq-search tq-merge tq-recall tq-inspect; do
		[ -x "$D$PREFIX/bin/$p" ] || { echo "no bin/$p" >&2; false; }
		[ -f "$D$PREFIX/share/man/man1/$p.1" ] || { echo "no man1/$p.1" >&2; false; }
		[ "$(readlink "$D$PREFIX/share/bash-completion/completions/$p")" = tq ]
	done
	for f in lib/libtq.a lib/libtq.so.0.1.0 include/tq.h lib/pkgconfig/libtq.pc \
	    share/man/man5/tq.5 share/man/man7/tq-slurm.7 \
	    share/bash-completion/completions/tq; do
		[ -f "$D$PREFIX/$f" ] || { echo "no $f" >&2; false; }
	done
	assert_equal "$(readlink "$LIB/libtq.so.0")" libtq.so.0.1.0
	assert_equal "$(readlink "$LIB/libtq.so")" libtq.so.0
	run readelf -d "$LIB/libtq.so.0.1.0"
	[[ "$output" == *"Library soname: [libtq.so.0]"* ]] || { show; false; }
	# Nothing outside DESTDIR$PREFIX but the test's own /usr link.
	assert_equal "$(cd "$D" && ls)" "$(printf '%s\n' opt usr)"
	"$D$PREFIX/bin/tq-inspect" --version
}

@test "libtq.pc: the installed prefix, -ltq, the private modules" {
	run pkg-config --modversion libtq
	assert_equal "$output" 0.1.0
	run grep -E '^(prefix=|Libs:|Requires.private:|Cflags:)' "$LIB/pkgconfig/libtq.pc"
	assert_equal "${lines[0]}" "prefix=$PREFIX"
	assert_equal "${lines[1]}" "Requires.private: openblas lapacke libzstd libxxhash"
	assert_equal "${lines[2]}" 'Libs: -L${libdir} -ltq'
	assert_equal "${lines[3]}" 'Cflags: -I${includedir}'
	run pkg-config --libs libtq
	assert_equal "${output% }" "-L$LIB -ltq"
	run pkg-config --static --libs libtq
	[[ "$output" == "-L$LIB -ltq "*-lopenblas*-lzstd*-lxxhash* ]] || { show; false; }
}

# Checks the example's output: 3 queries of 5 results, each query's first
# result itself at distance 0.
check_nearest() {
	assert_status 0
	assert_equal "${#lines[@]}" 15
	assert_equal "${lines[0]}" $'0\t1\t0\t0.0000'
	assert_equal "${lines[5]}" $'1\t1\t1\t0.0000'
	assert_equal "${lines[10]}" $'2\t1\t2\t0.0000'
}

@test "examples/nearest.c linked statically through pkg-config --static" {
	cd_tmp
	# -l:libtq.a names the static library; libtq.so is beside it.
	cc -Wall -Wextra -Werror -o nearest "$TOP/examples/nearest.c" \
	    $(pkg-config --cflags libtq) \
	    $(pkg-config --static --libs libtq | sed 's/-ltq /-l:libtq.a /')
	run readelf -d nearest
	[[ "$output" != *libtq* ]] || { show; false; }
	TMPDIR=$PWD run --separate-stderr ./nearest
	check_nearest
	echo "$output" >static.out
	# The example cleans up its temporary directory.
	assert_only_files . nearest static.out
	run --separate-stderr ./nearest "$FIXTURES/small.bin"
	assert_status 0
	assert_equal "${lines[0]}" $'0\t1\t0\t0.0000'
	run --separate-stderr ./nearest no-such-file
	assert_status 1
	assert_equal "$stderr" "nearest: no-such-file: open: No such file or directory"
}

@test "examples/nearest.c linked against libtq.so, run with LD_LIBRARY_PATH" {
	cd_tmp
	cc -Wall -Wextra -Werror -o nearest "$TOP/examples/nearest.c" \
	    $(pkg-config --cflags --libs libtq)
	run readelf -d nearest
	[[ "$output" == *"Shared library: [libtq.so.0]"* ]] || { show; false; }
	LD_LIBRARY_PATH=$LIB run --separate-stderr ./nearest
	check_nearest
	run env LD_LIBRARY_PATH="$LIB" ldd ./nearest
	[[ "$output" == *"libtq.so.0 => $LIB/libtq.so.0 "* ]] || { show; false; }
}

@test "examples/nearest.py: libtq.so through ctypes gives tq-search's bytes" {
	local args ix

	cd_tmp
	for args in "-k 5 v1-flat.tqi" "-k 3 --oversample auto v1-flat.tqi" \
	    "-k 4 --probes 2 --oversample 2 v1-ivf.tqi"; do
		ix=$FIXTURES/${args##* }
		set -- ${args% *}
		python3 "$TOP/examples/nearest.py" --lib "$LIB/libtq.so" "$@" \
		    "$ix" "$FIXTURES/small.queries.bin" >py.out
		"$TQ_BIN/tq-search" "$@" -i "$FIXTURES/small.queries.bin" "$ix" >c.out
		[ -s c.out ] && cmp py.out c.out
	done
	# Away from the tree it finds libtq.so.0 on the library path.
	cp "$TOP/examples/nearest.py" .
	LD_LIBRARY_PATH=$LIB run --separate-stderr python3 ./nearest.py \
	    "$FIXTURES/v1-flat.tqi" "$FIXTURES/small.queries.bin"
	assert_status 0
	assert_equal "${#lines[@]}" 100
	run --separate-stderr python3 ./nearest.py --lib "$LIB/libtq.so" \
	    no-such-file "$FIXTURES/small.queries.bin"
	assert_status 1
	assert_equal "$stderr" "nearest.py: no-such-file: open: No such file or directory"
	printf '1 2 3\n' >q3.txt
	run --separate-stderr python3 ./nearest.py --lib "$LIB/libtq.so" \
	    "$FIXTURES/v1-flat.tqi" q3.txt
	assert_status 1
	assert_equal "$stderr" "nearest.py: q3.txt: 3-d queries for a 16-d index"
	run --separate-stderr python3 ./nearest.py -k 0 a b
	assert_status 2
}

@test "libtq.so exports exactly the functions lib/tq.h declares" {
	local exported declared
	exported=$(nm -D --defined-only "$LIB/libtq.so" | awk '{ print $NF }' |
	    sed 's/@.*//' | LC_ALL=C sort -u)
	declared=$(header_functions)
	[ "$(wc -l <<<"$declared")" -ge 50 ]
	assert_equal "$(grep -v '^tq_' <<<"$exported")" ""
	assert_equal "$exported" "$declared"
}

@test "make uninstall removes what install put there" {
	local build

	build=$(build_dir)
	cp -a "$D" "$BATS_TEST_TMPDIR/dest"
	MAKEFLAGS= make -C "$TOP" -s --no-print-directory BUILD="$build" \
	    DESTDIR="$BATS_TEST_TMPDIR/dest" PREFIX="$PREFIX" uninstall
	assert_equal "$(cd "$BATS_TEST_TMPDIR/dest" && find . ! -type d | sort)" "./usr"
}
