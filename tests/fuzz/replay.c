/*
 * replay.c - a plain driver for the fuzz targets, without libFuzzer: calls
 * LLVMFuzzerTestOneInput once on every regular file of the directories (or
 * files) given as arguments, so that "make check" replays the committed
 * corpora with any compiler.  Prints the number of inputs run; a crash is
 * the failure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
run_file(const char *path)
{
	FILE *fp;
	uint8_t *buf;
	long len;

	if ((fp = fopen(path, "rb")) == NULL ||
	    fseek(fp, 0, SEEK_END) != 0 || (len = ftell(fp)) < 0 ||
	    fseek(fp, 0, SEEK_SET) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	/* One extra byte so that an empty input is not a NULL pointer. */
	if ((buf = malloc((size_t)len + 1)) == NULL ||
	    fread(buf, 1, (size_t)len, fp) != (size_t)len) {
		fprintf(stderr, "replay: %s: read failed\n", path);
		return -1;
	}
	fclose(fp);
	LLVMFuzzerTestOneInput(buf, (size_t)len);
	free(buf);
	return 0;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
main(int argc, char **argv)
{
	struct dirent *de;
	struct stat sb;
	char **names, path[4096];
	size_t nnames, cap, i, total = 0;
	DIR *d;
	int a;

	for (a = 1; a < argc; a++) {
		if (stat(argv[a], &sb) == -1) {
			fprintf(stderr, "replay: %s: %s\n", argv[a],
			    strerror(errno));
			return 1;
		}
		if (!S_ISDIR(sb.st_mode)) {
			if (run_file(argv[a]) == -1)
				return 1;
			total++;
			continue;
		}
		if ((d = opendir(argv[a])) == NULL) {
			fprintf(stderr, "replay: %s: %s\n", argv[a],
			    strerror(errno));
			return 1;
		}
		names = NULL;
		nnames = cap = 0;
		while ((de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			if (nnames == cap) {
				cap = cap ? 2 * cap : 64;
				names = realloc(names, cap * sizeof(*names));
				if (names == NULL)
					return 1;
			}
			if ((names[nnames++] = strdup(de->d_name)) == NULL)
				return 1;
		}
		closedir(d);
		/* A fixed order, so that a failure repeats. */
		qsort(names, nnames, sizeof(*names), cmp_str);
		for (i = 0; i < nnames; i++) {
			snprintf(path, sizeof(path), "%s/%s", argv[a], names[i]);
			if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
				if (run_file(path) == -1)
					return 1;
				total++;
			}
			free(names[i]);
		}
		free(names);
	}
	printf("%zu inputs\n", total);
	return 0;
}
