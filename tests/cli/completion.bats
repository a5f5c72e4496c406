#!/usr/bin/env bats
# completions/tq: sourced into this shell and called as bash would, with
# COMP_WORDS and COMP_CWORD set.  Its option tables are checked against
# the getopt_long tables and option strings of cmd/tq-*.c.

load helpers

PROGS="tq-fit tq-encode tq-build tq-search tq-merge tq-recall tq-inspect tq-cat"

setup() {
	# shellcheck source=../../completions/tq
	source "$TOP/completions/tq"
}

# Completes the words given, the last being the one under the cursor, and
# prints the candidates sorted, one a line.
complete_words() {
	COMP_WORDS=("$@")
	COMP_CWORD=$(($# - 1))
	COMP_LINE="$*"
	COMP_POINT=${#COMP_LINE}
	_tq
	printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | LC_ALL=C sort
}

# From the C file: "--name" or "--name:" (takes an argument), sorted; an
# optional argument (--stats[=batch]) is completed as a flag.
c_longopts() {
	sed -n '/^static const struct option longopts\[\] = {/,/^};/p' \
	    "$TOP/cmd/$1.c" |
	    sed -nE 's/.*\{ "([a-z0-9-]+)",[[:space:]]*(no|required|optional)_argument.*/--\1 \2/p' |
	    sed 's/ no$//; s/ optional$//; s/ required$/:/' | LC_ALL=C sort
}

# From the C file's getopt_long option string: "-x" or "-x:", sorted.
c_shortopts() {
	grep -o 'getopt_long(argc, argv, "[^"]*"' "$TOP/cmd/$1.c" |
	    sed 's/.*"\(.*\)"/\1/' | grep -o '.:\?' | sed 's/^/-/' | LC_ALL=C sort
}

# The same from completions/tq.
comp_opts() {
	local s
	for s in $(_tq_spec "$1"); do
		case $s in
		*:*) echo "${s%%:*}:" ;;
		*) echo "$s" ;;
		esac
	done | grep -- "$2" | LC_ALL=C sort
}

@test "completion: each program's options and their arguments match its C file" {
	for p in $PROGS; do
		[ -n "$(c_longopts "$p")" ] && [ -n "$(c_shortopts "$p")" ]
		assert_equal "$(comp_opts "$p" '^--')" "$(c_longopts "$p")"
		assert_equal "$(comp_opts "$p" '^-[^-]')" "$(c_shortopts "$p")"
	done
}

@test "completion: '--' lists every long option, '-' the short ones too" {
	for p in $PROGS; do
		assert_equal "$(complete_words "$p" --)" \
		    "$(c_longopts "$p" | sed 's/:$//' | LC_ALL=C sort)"
		assert_equal "$(complete_words "$p" -)" \
		    "$( (c_longopts "$p"; c_shortopts "$p") | sed 's/:$//' | LC_ALL=C sort)"
	done
	assert_equal "$(complete_words tq-search --ove)" "--oversample"
	assert_equal "$(complete_words tq-build --no)" "$(printf '%s\n' --no-calibrate --no-centre --no-wait)"
	assert_equal "$(complete_words tq-inspect --v)" "$(printf '%s\n' --verify --version)"
}

@test "completion: the names an option takes" {
	assert_equal "$(complete_words tq-fit -m '')" \
	    "$(printf '%s\n' angular cosine dot euclidean ip l2)"
	assert_equal "$(complete_words tq-search --format '')" \
	    "$(printf '%s\n' ivecs json tsv)"
	assert_equal "$(complete_words tq-search --format j)" json
	assert_equal "$(complete_words tq-merge --format '')" \
	    "$(printf '%s\n' ivecs json tsv)"
	assert_equal "$(complete_words tq-encode --decode --format '')" \
	    "$(printf '%s\n' fixture fvecs)"
	assert_equal "$(complete_words tq-build --originals '')" \
	    "$(printf '%s\n' f16 f32 none)"
	assert_equal "$(complete_words tq-fit --rotation s)" structured
	assert_equal "$(complete_words tq-fit --rotation h)" hadamard
	assert_equal "$(complete_words tq-fit --lists '')" auto
	assert_equal "$(complete_words tq-build -b '')" "$(printf '%s\n' 1 2 3 4)"
	assert_equal "$(complete_words tq-recall --sweep p)" "probes="
	# "--opt=value" as one word, and split at "=" as bash does.
	assert_equal "$(complete_words tq-search --format=i)" ivecs
	assert_equal "$(complete_words tq-build --originals = '')" \
	    "$(printf '%s\n' f16 f32 none)"
	assert_equal "$(complete_words tq-build --originals = f1)" f16
	# Numbers and names are not guessed.
	assert_equal "$(complete_words tq-search -k '')" ""
	assert_equal "$(complete_words tq-search --threads -)" ""
}

@test "completion: files for file arguments and operands" {
	cd_tmp
	touch idx.tqi queries.bin q.tq
	mkdir sub
	assert_equal "$(complete_words tq-search -i q)" "$(printf '%s\n' q.tq queries.bin)"
	assert_equal "$(complete_words tq-search -k 10 i)" idx.tqi
	assert_equal "$(complete_words tq-build -q '')" \
	    "$(printf '%s\n' idx.tqi q.tq queries.bin sub)"
	assert_equal "$(complete_words tq-inspect --json s)" sub
	assert_equal "$(complete_words tq-recall --hdf5 id)" idx.tqi
	# After "--" everything is a file, even a name that starts with "-".
	touch -- -x.bin
	assert_equal "$(complete_words tq-inspect -- -)" -x.bin
	# A word that is not a program of tq completes nothing.
	assert_equal "$(complete_words tq-nothing -)" ""
}
