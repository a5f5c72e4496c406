#!/usr/bin/env bats
# --help lists every option, and agrees with the program's option table
# and its man page, so that none of the three can drift from the others.

load helpers

PROGS="tq-fit tq-encode tq-build tq-search tq-merge tq-recall tq-inspect tq-cat"

# The long options of a program's getopt_long table, one a line.
longopts_of() {
	sed -n '/^static const struct option longopts\[\] = {/,/^};/p' \
	    "$TOP/cmd/$1.c" | grep -o '{ "[a-z0-9-]*"' | cut -d'"' -f2
}

# The option lines of --help: after the usage, before "See PROG(1).".
help_options() {
	"$TQ_BIN/$1" --help | sed '1,/^$/d; /^$/,$d'
}

@test "every option table has entries (the parser of the C file works)" {
	for p in $PROGS; do
		run longopts_of "$p"
		[ "${#lines[@]}" -ge 3 ] || { echo "$p: ${lines[*]}" >&2; false; }
		[[ " ${lines[*]} " == *" help "* ]]
		[[ " ${lines[*]} " == *" version "* ]]
	done
}

@test "--help: usage, a blank line, the options, a blank line, the man page" {
	for p in $PROGS; do
		run --separate-stderr "$TQ_BIN/$p" --help
		assert_status 0
		assert_equal "$stderr" ""
		[[ "$output" == "usage: $p "* ]] || { show; false; }
		[[ "$output" == *$'\n\n  '[\ -]* ]] || { show; false; }
		[[ "$output" == *$'\n'"  -h, --help "* ]] || { show; false; }
		[[ "$output" == *$'\n\n'"See $p(1)." ]] || { show; false; }
		# Every line of the option part names an option or continues
		# the one before, and fits in 80 columns.
		help_options "$p" | while IFS= read -r l; do
			[[ "$l" == "  -"* || "$l" == "      --"* || "$l" == "                        "[a-z]* ]] ||
			    { echo "$p: odd help line '$l'" >&2; exit 1; }
			[ "${#l}" -lt 80 ] || { echo "$p: long line '$l'" >&2; exit 1; }
		done
	done
}

@test "every long option of each program is in its --help and its man page" {
	local p o help man=0
	command -v mandoc >/dev/null && man=1
	for p in $PROGS; do
		help=$(help_options "$p")
		for o in $(longopts_of "$p"); do
			grep -Eq -- "^  (-[a-zA-Z], )?    --$o( |$)|^  -[a-zA-Z], --$o( |$)" <<<"$help" ||
			    { echo "$p: --$o is not in --help" >&2; false; }
			grep -Eq -- "^\.It .*Fl -$o( |$)" "$TOP/man/$p.1" ||
			    { echo "$p: --$o is not in man/$p.1" >&2; false; }
		done
	done
}

@test "--help and the man page list no long option the program lacks" {
	local p o opts
	for p in $PROGS; do
		opts=" $(longopts_of "$p" | tr '\n' ' ') "
		for o in $(help_options "$p" | grep -o -- '^  [-a-zA-Z, ]*--[a-z0-9-]*' |
		    sed 's/.*--//'); do
			[[ "$opts" == *" $o "* ]] ||
			    { echo "$p: --help lists --$o, which it does not take" >&2; false; }
		done
		for o in $(grep -o -- '^\.It .*Fl -[a-z][a-z0-9-]*' "$TOP/man/$p.1" |
		    grep -o -- 'Fl -[a-z][a-z0-9-]*' | sed 's/Fl -//'); do
			[[ "$opts" == *" $o "* ]] ||
			    { echo "$p: man/$p.1 lists --$o, which it does not take" >&2; false; }
		done
	done
}

@test "a usage error prints only the short usage, on stderr, status 2" {
	for p in $PROGS; do
		run --separate-stderr "$TQ_BIN/$p" --no-such-option
		assert_status 2
		assert_equal "$output" ""
		[[ "$stderr" == *"usage: $p "* ]] || { show; false; }
		[[ "$stderr" != *"--help "* && "$stderr" != *"See $p(1)"* ]] || { show; false; }
	done
}
