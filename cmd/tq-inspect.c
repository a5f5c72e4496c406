/* tq-inspect - describe and verify a quantizer or index file. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static const char usage_str[] =
    "tq-inspect [--json] [--verify] [--calibration] file\n"
    "       tq-inspect --cpu";

static const char help_str[] =
    "      --calibration     also every setting of an index's calibration\n"
    "      --cpu             print the CPU features and the scan kernel chosen\n"
    "  -h, --help            print this help and exit\n"
    "      --json            print the description as one JSON object\n"
    "  -V, --version         print the version and exit\n"
    "      --verify          also check every section's checksum\n";

enum { OPT_CALIB = 256, OPT_CPU, OPT_JSON, OPT_VERIFY };

static const struct option longopts[] = {
	{ "calibration", no_argument,	NULL, OPT_CALIB },
	{ "cpu",	no_argument,	NULL, OPT_CPU },
	{ "help",	no_argument,	NULL, 'h' },
	{ "json",	no_argument,	NULL, OPT_JSON },
	{ "verify",	no_argument,	NULL, OPT_VERIFY },
	{ "version",	no_argument,	NULL, 'V' },
	{ NULL,		0,		NULL, 0 }
};

static const char *
kind_name(enum tq_file_kind k)
{
	return k == TQ_FILE_INDEX ? "index" : "quantizer";
}

/* The calibration of an index for tq-search --recall (tq(5) CALB). */
static struct tq_calib_info calib;
/* With --calibration: its measured entries, in file order. */
static struct tq_calib_entry *entries;
static size_t nentries;

static void
read_calib(const char *path, const struct tq_file_info *fi, int all)
{
	struct tq_index *ix;
	enum tq_status st;

	if (fi->kind != TQ_FILE_INDEX)
		return;
	if ((st = tq_index_open(path, &ix)) != TQ_OK ||
	    (st = tq_index_calib_info(ix, &calib)) != TQ_OK)
		die_status(st, path);
	if (all && calib.present) {
		/* One slot a setting; unmeasured ones are written over. */
		entries = xcalloc((size_t)calib.nk * calib.nprobes *
		    calib.noversample, sizeof(*entries));
		for (uint32_t ki = 0; ki < calib.nk; ki++)
			for (uint32_t pi = 0; pi < calib.nprobes; pi++)
				for (uint32_t oi = 0; oi < calib.noversample;
				    oi++) {
					struct tq_calib_entry *e =
					    &entries[nentries];

					if ((st = tq_index_calib_entry(ix, ki,
					    pi, oi, e)) != TQ_OK)
						die_status(st, path);
					nentries += e->measured != 0;
				}
	}
	tq_index_close(ix);
}

/* --calibration: a line per measured setting. */
static void
print_entries_text(void)
{
	if (entries == NULL)
		return;
	printf("%6s %7s %10s %8s %8s %12s %8s %9s %14s\n", "k", "probes",
	    "oversample", "recall", "se", "rows", "refined", "originals",
	    "cost");
	for (size_t i = 0; i < nentries; i++) {
		const struct tq_calib_entry *e = &entries[i];
		char p[16];

		if (e->probes == 0)
			snprintf(p, sizeof(p), "-");
		else
			snprintf(p, sizeof(p), "%u", (unsigned)e->probes);
		printf("%6u %7s %10g %8.4f %8.4f %12.1f %8.1f %9.1f %14.1f\n",
		    (unsigned)e->k, p, (double)e->oversample, e->recall,
		    e->se, e->rows, e->refined, e->originals, e->cost);
	}
}

static void
print_entries_json(void)
{
	if (entries == NULL)
		return;
	printf(",\"entries\":[");
	for (size_t i = 0; i < nentries; i++) {
		const struct tq_calib_entry *e = &entries[i];

		printf("%s{\"k\":%u,\"probes\":%u,\"oversample\":%g,"
		    "\"recall\":%.6f,\"se\":%.6f,\"rows_scanned\":%.1f,"
		    "\"refined\":%.1f,\"originals_read\":%.1f,"
		    "\"cost\":%.1f}", i ? "," : "", (unsigned)e->k,
		    (unsigned)e->probes, (double)e->oversample, e->recall,
		    e->se, e->rows, e->refined, e->originals, e->cost);
	}
	printf("]");
}

static void
print_calib_text(void)
{
	uint32_t i;

	if (!calib.present)
		return;
	printf("calibration %u queries (%s) at %llu live rows, k ",
	    (unsigned)calib.queries, calib.source == 1 ? "rows of the index" :
	    "given", (unsigned long long)calib.live);
	for (i = 0; i < calib.nk; i++)
		printf("%s%u", i ? "," : "", (unsigned)calib.k[i]);
	printf(", %u settings measured%s\n", (unsigned)calib.measured,
	    calib.stale ? ", stale: recalibrate" : "");
}

static void
print_calib_json(void)
{
	uint32_t i;

	if (!calib.present)
		return;
	printf(",\"calibration\":{\"source\":\"%s\",\"queries\":%u,"
	    "\"live\":%llu,\"k\":[", calib.source == 1 ? "rows" : "given",
	    (unsigned)calib.queries, (unsigned long long)calib.live);
	for (i = 0; i < calib.nk; i++)
		printf("%s%u", i ? "," : "", (unsigned)calib.k[i]);
	printf("],\"settings\":%u,\"stale\":%s", (unsigned)calib.measured,
	    calib.stale ? "true" : "false");
	print_entries_json();
	printf("}");
}

static void
print_text(const struct tq_file_info *fi, int verified)
{
	uint32_t i, ns = fi->nsections < 32 ? fi->nsections : 32;

	printf("kind %s\n", kind_name(fi->kind));
	printf("version %u\n", fi->version);
	printf("size %llu\n", (unsigned long long)fi->file_size);
	printf("dim %u\n", fi->dim);
	printf("bits %u\n", fi->bits);
	printf("metric %s\n", tq_metric_name(fi->metric));
	printf("seed %llu\n", (unsigned long long)fi->seed);
	printf("rotation %s\n", rotation_name(fi->rotation));
	if (fi->rotation == TQ_ROT_STRUCTURED)
		printf("rotation-blocks %u in %u rounds\n",
		    (unsigned)fi->rotation_blocks,
		    (unsigned)fi->rotation_rounds);
	printf("centred %s\n", fi->centred ? "yes" : "no");
	printf("scale-search %s\n", fi->scale_search ? "yes" : "no");
	if (fi->lists > 0)
		printf("lists %u\n", (unsigned)fi->lists);
	if (fi->residual)
		printf("residual yes\n");
	if (fi->kind == TQ_FILE_INDEX) {
		printf("vectors %llu\n", (unsigned long long)fi->count);
		printf("segments %u\n", (unsigned)fi->segments);
		if (fi->commit > 0)
			printf("commit %llu\n", (unsigned long long)fi->commit);
		if (fi->live < fi->count)
			printf("live %llu\n", (unsigned long long)fi->live);
		if (fi->dups > 1)
			printf("copies %u lists within ratio %g\n",
			    (unsigned)fi->dups, (double)fi->dup_ratio);
		if (fi->labels > 0)
			printf("labels %llu\n", (unsigned long long)fi->labels);
		printf("originals %s\n", originals_name(fi->originals));
		printf("bytes/vector %.1f\n", fi->bytes_per_vector);
		printf("originals bytes/vector %.1f\n",
		    fi->original_bytes_per_vector);
		print_calib_text();
		print_entries_text();
	}
	printf("sections:\n");
	for (i = 0; i < ns; i++) {
		printf("  %-4s  offset %llu  length %llu  xxh64 %016llx",
		    fi->sections[i].tag,
		    (unsigned long long)fi->sections[i].offset,
		    (unsigned long long)fi->sections[i].length,
		    (unsigned long long)fi->sections[i].checksum);
		if (fi->sections[i].part > 0)
			printf("  segment %u", fi->sections[i].part - 1);
		printf("\n");
	}
	if (fi->nsections > ns)
		printf("  ... %u more\n", fi->nsections - ns);
	if (verified)
		printf("checksums ok\n");
}

static void
print_json(const char *path, const struct tq_file_info *fi, int verified)
{
	uint32_t i, ns = fi->nsections < 32 ? fi->nsections : 32;

	printf("{\"file\":");
	json_string(stdout, path);
	printf(",\"kind\":\"%s\",\"version\":%u,\"size\":%llu,\"dim\":%u,"
	    "\"bits\":%u,\"metric\":\"%s\",\"seed\":%llu,\"rotation\":\"%s\","
	    "\"centred\":%s,\"scale_search\":%s,\"residual\":%s",
	    kind_name(fi->kind), fi->version,
	    (unsigned long long)fi->file_size, fi->dim, fi->bits,
	    tq_metric_name(fi->metric), (unsigned long long)fi->seed,
	    rotation_name(fi->rotation), fi->centred ? "true" : "false",
	    fi->scale_search ? "true" : "false",
	    fi->residual ? "true" : "false");
	if (fi->rotation == TQ_ROT_STRUCTURED)
		printf(",\"rotation_blocks\":%u,\"rotation_rounds\":%u",
		    (unsigned)fi->rotation_blocks,
		    (unsigned)fi->rotation_rounds);
	printf(",\"lists\":%u", (unsigned)fi->lists);
	if (fi->kind == TQ_FILE_INDEX)
		printf(",\"vectors\":%llu,\"originals\":\"%s\","
		    "\"bytes_per_vector\":%.1f,"
		    "\"original_bytes_per_vector\":%.1f",
		    (unsigned long long)fi->count,
		    originals_name(fi->originals), fi->bytes_per_vector,
		    fi->original_bytes_per_vector);
	if (fi->kind == TQ_FILE_INDEX)
		printf(",\"segments\":%u,\"commit\":%llu",
		    (unsigned)fi->segments, (unsigned long long)fi->commit);
	if (fi->kind == TQ_FILE_INDEX && fi->live < fi->count)
		printf(",\"live\":%llu", (unsigned long long)fi->live);
	if (fi->kind == TQ_FILE_INDEX && fi->labels > 0)
		printf(",\"labels\":%llu", (unsigned long long)fi->labels);
	if (fi->kind == TQ_FILE_INDEX && fi->dups > 1)
		printf(",\"copies\":%u,\"copy_ratio\":%g", (unsigned)fi->dups,
		    (double)fi->dup_ratio);
	print_calib_json();
	printf(",\"nsections\":%u,\"sections\":[", fi->nsections);
	for (i = 0; i < ns; i++) {
		printf("%s{\"tag\":", i ? "," : "");
		json_string(stdout, fi->sections[i].tag);
		printf(",\"offset\":%llu,\"length\":%llu,\"xxh64\":\"%016llx\"",
		    (unsigned long long)fi->sections[i].offset,
		    (unsigned long long)fi->sections[i].length,
		    (unsigned long long)fi->sections[i].checksum);
		if (fi->sections[i].part > 0)
			printf(",\"segment\":%u", fi->sections[i].part - 1);
		printf("}");
	}
	printf("]");
	if (verified)
		printf(",\"checksums\":\"ok\"");
	printf("}\n");
}

static void
print_cpu(void)
{
	struct tq_blas_info bi;
	const char *why = getenv("TQ_BLAS_REEXEC");

	tq_blas_info(&bi);
	printf("cpu: %s\n", tq_cpu_features());
	printf("kernel: %s\n", tq_kernel_name());
	printf("list-filter: %s\n", tq_list_filter_name());
	printf("single-list-filter: %s\n", tq_single_filter_name());
	printf("blas: %s\n", bi.library);
	printf("blas-core: %s", bi.core != NULL ? bi.core : "unknown");
	/* Set by cmd_init when it re-ran the program with a wider core. */
	if (why != NULL && getenv("OPENBLAS_CORETYPE") != NULL)
		printf(" (OPENBLAS_CORETYPE=%s set by tq; %s chosen by "
		    "OpenBLAS)", getenv("OPENBLAS_CORETYPE"), why);
	printf("\n");
	printf("blas-threads: %d\n", bi.threads);
	finish_stdout();
	if (bi.wider != NULL)
		warnmsg("warning: BLAS core %s is narrower than this CPU "
		    "supports; set OPENBLAS_CORETYPE=%s", bi.core, bi.wider);
}

int
main(int argc, char *argv[])
{
	struct tq_file_info fi;
	enum tq_status st;
	int ch, cpu = 0, json = 0, verify = 0, all = 0;

	cmd_init(argv, usage_str, help_str);
	while ((ch = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			usage_help();
		case 'V':
			print_version();
		case OPT_CALIB:
			all = 1;
			break;
		case OPT_CPU:
			cpu = 1;
			break;
		case OPT_JSON:
			json = 1;
			break;
		case OPT_VERIFY:
			verify = 1;
			break;
		default:
			usage_exit();
		}
	}
	argc -= optind;
	argv += optind;

	if (cpu) {
		if (json || verify || all || argc > 0)
			usage_error("--cpu takes no other option or file");
		print_cpu();
		return 0;
	}
	if (argc < 1)
		usage_error("missing file");
	if (argc > 1)
		usage_error("unexpected argument '%s'", argv[1]);

	if ((st = tq_file_info(argv[0], &fi)) != TQ_OK)
		die_status(st, argv[0]);
	if (verify && (st = tq_file_verify(argv[0])) != TQ_OK)
		die_status(st, argv[0]);
	read_calib(argv[0], &fi, all);
	if (json)
		print_json(argv[0], &fi, verify);
	else
		print_text(&fi, verify);
	finish_stdout();
	return 0;
}
