#!/usr/bin/env bats
# Behaviour shared by all the programs: --help, --version, usage errors.

load helpers

PROGS="tq-fit tq-encode tq-build tq-search tq-merge tq-recall tq-inspect tq-cat"

# The SYNOPSIS of each program as the man pages give it, whitespace collapsed.
synopsis() {
	case $1 in
	tq-fit) echo 'tq-fit [-b bits] [-m metric] [-s seed] [--dataset name] [--no-centre] [--rotation auto|dense|structured|hadamard] [--rotation-block n] [--sample n] [--scale-search] [--lists n|auto [--residual]] [--train n] [--iterations n] [--threads n] (-d dim | -i corpus) -o quantizer' ;;
	tq-encode) echo 'tq-encode -q quantizer [-i input] [-o output] [--dataset name] [--threads n] tq-encode --decode -q quantizer [-i codes] [-o output] [--format fixture|fvecs]' ;;
	tq-build) echo 'tq-build [-q quantizer | [-b bits] [-m metric] [-s seed] [--no-centre] [--lists n|auto [--residual]]] [--ids file] [--labels file|auto] [--originals f32|f16|none] [--factors f16|f32] [--threads n] [--memory MiB] [--dups m] [--dup-ratio r] [--calibrate queries | --no-calibrate] [--calibrate-sample n] [--dataset name] [--shard i/n] [-v] -o index corpus tq-build --append [--ids file [--replace]] [--labels file|auto] [--factors f16|f32] [--threads n] [--memory MiB] [--max-segments n] [--no-wait] [--dataset name] [-v] [-o output] index corpus tq-build --delete ids [--no-wait] [-v] [-o output] index tq-build --compact [--factors f16|f32] [--threads n] [--memory MiB] [--no-wait] [-v] [--calibrate queries | --no-calibrate] [--calibrate-sample n] [-o output] index tq-build --recalibrate [--calibrate queries] [--calibrate-sample n] [--threads n] [--no-wait] [-v] [-o output] index' ;;
	tq-search) echo 'tq-search [-k k] [-i queries | --like-file file] [-o output] [--oversample f|auto[-set][:z]] [--threads n] [--batch n] [--format tsv|json|ivecs] [--dataset name] [--allow ids] [--radius r] [--probes n] [--recall R] [--labels] [--include-self] [--stats[=batch]] index tq-search --like [-k k] [-o output] [--oversample f|auto[-set][:z]] [--threads n] [--format tsv|json|ivecs] [--allow ids] [--radius r] [--probes n] [--recall R] [--include-self] [--stats[=batch]] index label ...' ;;
	tq-merge) echo 'tq-merge (-m metric | -q quantizer) [-k k] [-o output] [--format tsv|json|ivecs] result ...' ;;
	tq-recall) echo 'tq-recall --truth [-k k] [-m metric] [--threads n] [--dataset name] -o truth corpus queries tq-recall [--json] results truth tq-recall (--hdf5 file | --corpus file --queries file) [-b bits] [-m metric] [-s seed] [-k k] [--oversample list] [--threads n] [--no-centre] [--lists n|auto [--residual]] [--probes list] [--sweep param=list] [--recall list] [--queries-limit n] [--json] [--plot file] [--peers file] [--title text] tq-recall --plot file --peers file [-k k] [--title text]' ;;
	tq-inspect) echo 'tq-inspect [--json] [--verify] [--calibration] file tq-inspect --cpu' ;;
	tq-cat) echo 'tq-cat [-f format] [-o output] [--rows a:b] [--sample n [--seed s]] [--normalize] [--labels] [--dataset name] [input ...]' ;;
	esac
}

# The usage of a --help, up to the option lines that may follow a blank line.
normalise() { sed '/^$/,$d; s/^usage: //; s/^ *usage: //' | tr -s ' \t\n' ' ' | sed 's/^ //; s/ $//'; }

# The usage part of --help: the lines before the first blank one.
help_usage() { printf '%s\n' "$1" | sed '/^$/,$d'; }

check_help() {
	local p=$1 opt
	run --separate-stderr "$TQ_BIN/$p" "$2"
	assert_status 0
	assert_equal "$stderr" ""
	case "${lines[0]}" in
	"usage: $p "*) ;;
	*) echo "help does not start with 'usage: $p '" >&2; show; return 1 ;;
	esac
	assert_equal "$(help_usage "$output" | normalise)" "$(synopsis "$p")"
	assert_equal "${lines[${#lines[@]}-1]}" "See $p(1)."
}

check_version() {
	run --separate-stderr "$TQ_BIN/$1" "$2"
	assert_status 0
	assert_equal "$output" "$1 0.1.0"
	assert_equal "$stderr" ""
}

check_man() {
	local syn
	syn=$(man_synopsis "$1")
	[ -n "$syn" ] || skip "no man/$1.1 or no mandoc"
	run --separate-stderr "$TQ_BIN/$1" --help
	assert_equal "$(help_usage "$output" | normalise)" "$syn"
}

@test "--help prints the spec SYNOPSIS to stdout, exit 0" {
	for p in $PROGS; do
		check_help "$p" --help
	done
}

@test "-h is --help" {
	for p in $PROGS; do
		check_help "$p" -h
	done
}

@test "--help matches the man page SYNOPSIS" {
	for p in $PROGS; do
		check_man "$p"
	done
}

@test "--version and -V print 'PROG 0.1.0'" {
	for p in $PROGS; do
		check_version "$p" --version
		check_version "$p" -V
	done
}

@test "unknown long option: exit 2, one line then the usage on stderr" {
	for p in $PROGS; do
		run --separate-stderr "$TQ_BIN/$p" --no-such-option
		assert_usage_error "$p"
		[[ "${stderr_lines[0]}" == *no-such-option* ]] || { show; false; }
	done
}

@test "unknown short option: exit 2 with usage" {
	for p in $PROGS; do
		run --separate-stderr "$TQ_BIN/$p" -Z
		assert_usage_error "$p"
	done
}

@test "option missing its argument: exit 2 with usage" {
	run --separate-stderr "$TQ_BIN/tq-fit" -d 8 -o
	assert_usage_error tq-fit
	run --separate-stderr "$TQ_BIN/tq-search" x -k
	assert_usage_error tq-search
	run --separate-stderr "$TQ_BIN/tq-build" -o x y --threads
	assert_usage_error tq-build
}

@test "missing required arguments: exit 2 with usage" {
	cd_tmp
	mkfix c.bin 8 20
	run --separate-stderr "$TQ_BIN/tq-fit"
	assert_usage_error tq-fit
	run --separate-stderr "$TQ_BIN/tq-fit" -d 8		# no -o
	assert_usage_error tq-fit
	run --separate-stderr "$TQ_BIN/tq-fit" -o q.tq		# no -d or -i
	assert_usage_error tq-fit
	run --separate-stderr "$TQ_BIN/tq-build" c.bin		# no -o
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" -o x.tqi	# no corpus
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-search"		# no index
	assert_usage_error tq-search
	run --separate-stderr "$TQ_BIN/tq-encode" -i c.bin	# no -q
	assert_usage_error tq-encode
	run --separate-stderr "$TQ_BIN/tq-inspect"		# no file
	assert_usage_error tq-inspect
	run --separate-stderr "$TQ_BIN/tq-recall"
	assert_usage_error tq-recall
	run --separate-stderr "$TQ_BIN/tq-recall" --truth -o t.ivecs c.bin	# no queries
	assert_usage_error tq-recall
	run --separate-stderr "$TQ_BIN/tq-recall" a.ivecs		# no truth
	assert_usage_error tq-recall
	assert_only_files . c.bin
}

@test "extra operands: exit 2 with usage" {
	run --separate-stderr "$TQ_BIN/tq-fit" -d 8 -o q.tq extra
	assert_usage_error tq-fit
	run --separate-stderr "$TQ_BIN/tq-search" a b
	assert_usage_error tq-search
	run --separate-stderr "$TQ_BIN/tq-inspect" a b
	assert_usage_error tq-inspect
}

@test "bad numbers are usage errors (strict parsing, range checked)" {
	cd_tmp
	for k in 0 abc 10x -1 '' ' 5' 0x10 99999999999999999999; do
		run --separate-stderr "$TQ_BIN/tq-search" -k "$k" idx
		assert_usage_error tq-search
	done
	for b in 0 5 abc 4.0 -4; do
		run --separate-stderr "$TQ_BIN/tq-fit" -b "$b" -d 8 -o q.tq
		assert_usage_error tq-fit
		run --separate-stderr "$TQ_BIN/tq-build" -b "$b" -o x.tqi c.bin
		assert_usage_error tq-build
	done
	for d in 0 abc 8x -8; do
		run --separate-stderr "$TQ_BIN/tq-fit" -d "$d" -o q.tq
		assert_usage_error tq-fit
	done
	for s in abc -1 1.5; do
		run --separate-stderr "$TQ_BIN/tq-fit" -s "$s" -d 8 -o q.tq
		assert_usage_error tq-fit
	done
	for o in abc 1x '' -2 nan inf; do
		run --separate-stderr "$TQ_BIN/tq-search" --oversample "$o" idx
		assert_usage_error tq-search
	done
	for t in abc -1 2x; do
		run --separate-stderr "$TQ_BIN/tq-search" --threads "$t" idx
		assert_usage_error tq-search
		run --separate-stderr "$TQ_BIN/tq-build" --threads "$t" -o x.tqi c.bin
		assert_usage_error tq-build
	done
	run --separate-stderr "$TQ_BIN/tq-recall" --truth -k 0 -o t.ivecs c.bin q.bin
	assert_usage_error tq-recall
	run --separate-stderr "$TQ_BIN/tq-fit" --sample x -d 8 -o q.tq
	assert_usage_error tq-fit
	assert_only_files .
}

@test "bad names are usage errors (metric, rotation, format, originals)" {
	cd_tmp
	run --separate-stderr "$TQ_BIN/tq-fit" -m hamming -d 8 -o q.tq
	assert_usage_error tq-fit
	run --separate-stderr "$TQ_BIN/tq-fit" --rotation sparse -d 8 -o q.tq
	assert_usage_error tq-fit
	run --separate-stderr "$TQ_BIN/tq-build" -m hamming -o x.tqi c.bin
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" --originals f64 -o x.tqi c.bin
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-search" --format xml idx
	assert_usage_error tq-search
	run --separate-stderr "$TQ_BIN/tq-encode" --decode --format npy -q q.tq
	assert_usage_error tq-encode
	run --separate-stderr "$TQ_BIN/tq-recall" --truth -m hamming -o t.ivecs c.bin q.bin
	assert_usage_error tq-recall
	assert_only_files .
}

@test "conflicting options are usage errors" {
	cd_tmp
	mkfix c.bin 8 20
	"$TQ_BIN/tq-fit" -d 8 -o q.tq
	# -q excludes -b/-m/-s/--no-centre.
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq -b 2 -o x.tqi c.bin
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq -m ip -o x.tqi c.bin
	assert_usage_error tq-build
	run --separate-stderr "$TQ_BIN/tq-build" -q q.tq --no-centre -o x.tqi c.bin
	assert_usage_error tq-build
	# --hdf5 excludes --corpus/--queries.
	run --separate-stderr "$TQ_BIN/tq-recall" --hdf5 x.h5 --corpus c.bin --queries c.bin
	assert_usage_error tq-recall
	# --cpu takes no file.
	run --separate-stderr "$TQ_BIN/tq-inspect" --cpu q.tq
	assert_usage_error tq-inspect
	assert_only_files . c.bin q.tq
}

@test "a missing input file: exit 1, one line naming it" {
	cd_tmp
	run --separate-stderr "$TQ_BIN/tq-fit" -i nonexistent.bin -o q.tq
	assert_fail1 tq-fit nonexistent.bin "No such file or directory"
	run --separate-stderr "$TQ_BIN/tq-build" -o x.tqi nonexistent.bin
	assert_fail1 tq-build nonexistent.bin "No such file or directory"
	run --separate-stderr "$TQ_BIN/tq-search" nonexistent.tqi </dev/null
	assert_fail1 tq-search nonexistent.tqi "No such file or directory"
	run --separate-stderr "$TQ_BIN/tq-inspect" nonexistent.tqi
	assert_fail1 tq-inspect nonexistent.tqi "No such file or directory"
	run --separate-stderr "$TQ_BIN/tq-encode" -q nonexistent.tq </dev/null
	assert_fail1 tq-encode nonexistent.tq "No such file or directory"
	run --separate-stderr "$TQ_BIN/tq-recall" nonexistent.ivecs other.ivecs
	assert_fail1 tq-recall nonexistent.ivecs "No such file or directory"
	assert_only_files .
}

@test "an output in a missing directory: exit 1, one line naming it" {
	cd_tmp
	run --separate-stderr "$TQ_BIN/tq-fit" -d 8 -o no/such/dir/q.tq
	assert_fail1 tq-fit no/such/dir/q.tq
}
