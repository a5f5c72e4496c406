/*
 * peers.c - the JSON Lines peers file of peers.h.
 *
 * A hand-written parser for one flat JSON object per line (RFC 8259
 * grammar for strings and numbers, UTF-8 checked), so that tq-recall
 * needs no JSON library.  peer_parse() works on a byte range and reports
 * errors in a buffer; only peers_read() prints and exits.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "peers.h"

struct lex {
	const unsigned char *p, *start, *end;
	char *err;
	size_t errlen;
};

static int PRINTFLIKE(2, 3)
fail(struct lex *l, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(l->err, l->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static int
syntax(struct lex *l, const char *what)
{
	return fail(l, "invalid JSON at column %zu: %s",
	    (size_t)(l->p - l->start) + 1, what);
}

static void
skip_ws(struct lex *l)
{
	while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' ||
	    *l->p == '\r' || *l->p == '\n'))
		l->p++;
}

static int
hex4(const unsigned char *p, uint32_t *v)
{
	int i;

	*v = 0;
	for (i = 0; i < 4; i++) {
		*v <<= 4;
		if (p[i] >= '0' && p[i] <= '9')
			*v |= (uint32_t)(p[i] - '0');
		else if ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'f')
			*v |= (uint32_t)((p[i] | 0x20) - 'a' + 10);
		else
			return -1;
	}
	return 0;
}

static size_t
put_utf8(char *o, uint32_t c)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (char)(0xc0 | c >> 6);
		o[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (char)(0xe0 | c >> 12);
		o[1] = (char)(0x80 | (c >> 6 & 0x3f));
		o[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | c >> 18);
	o[1] = (char)(0x80 | (c >> 12 & 0x3f));
	o[2] = (char)(0x80 | (c >> 6 & 0x3f));
	o[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/*
 * A string at l->p (the opening quote); *out gets it decoded and
 * NUL-terminated when out != NULL.  A \u0000 is refused, since the
 * result is a C string.
 */
static int
string(struct lex *l, char **out)
{
	const unsigned char *q;
	char *buf = NULL;
	size_t n = 0;
	uint32_t c, lo;

	if (l->p >= l->end || *l->p != '"')
		return syntax(l, "expected a string");
	l->p++;
	/* Decoded text is never longer than the source. */
	for (q = l->p; q < l->end && *q != '"'; q++)
		if (*q == '\\' && q + 1 < l->end)
			q++;
	if (out != NULL && (buf = malloc((size_t)(q - l->p) + 1)) == NULL)
		return fail(l, "out of memory");
	for (;;) {
		if (l->p >= l->end) {
			free(buf);
			return syntax(l, "unterminated string");
		}
		if (*l->p == '"')
			break;
		if (*l->p < 0x20) {
			free(buf);
			return syntax(l, "control character in a string");
		}
		if (*l->p == '\\') {
			if (l->end - l->p < 2) {
				free(buf);
				return syntax(l, "unterminated string");
			}
			switch (l->p[1]) {
			case '"': case '\\': case '/': c = l->p[1]; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u':
				if (l->end - l->p < 6 || hex4(l->p + 2, &c) != 0) {
					free(buf);
					return syntax(l, "bad \\u escape");
				}
				if (c >= 0xd800 && c <= 0xdbff) {
					if (l->end - l->p < 12 || l->p[6] != '\\' ||
					    l->p[7] != 'u' ||
					    hex4(l->p + 8, &lo) != 0 ||
					    lo < 0xdc00 || lo > 0xdfff) {
						free(buf);
						return syntax(l, "unpaired "
						    "surrogate");
					}
					c = 0x10000 + ((c - 0xd800) << 10) +
					    (lo - 0xdc00);
					l->p += 6;
				} else if (c >= 0xdc00 && c <= 0xdfff) {
					free(buf);
					return syntax(l, "unpaired surrogate");
				} else if (c == 0) {
					free(buf);
					return syntax(l, "\\u0000 in a string");
				}
				l->p += 4;
				break;
			default:
				free(buf);
				return syntax(l, "bad escape");
			}
			l->p += 2;
			if (buf != NULL)
				n += put_utf8(buf + n, c);
			continue;
		}
		if (*l->p < 0x80) {
			if (buf != NULL)
				buf[n++] = (char)*l->p;
			l->p++;
			continue;
		}
		if ((c = (uint32_t)utf8_len(l->p, (size_t)(l->end - l->p))) ==
		    0) {
			free(buf);
			return syntax(l, "invalid UTF-8");
		}
		if (buf != NULL)
			memcpy(buf + n, l->p, c);
		n += c;
		l->p += c;
	}
	l->p++;
	if (buf != NULL) {
		buf[n] = '\0';
		*out = buf;
	}
	return 0;
}

/* A number in JSON's grammar at l->p. */
static int
number(struct lex *l, double *v)
{
	const unsigned char *s = l->p;
	char tmp[64];

	if (l->p < l->end && *l->p == '-')
		l->p++;
	if (l->p < l->end && *l->p == '0')
		l->p++;
	else if (l->p < l->end && *l->p >= '1' && *l->p <= '9')
		while (l->p < l->end && *l->p >= '0' && *l->p <= '9')
			l->p++;
	else
		return syntax(l, "bad number");
	if (l->p < l->end && *l->p == '.') {
		l->p++;
		if (l->p >= l->end || *l->p < '0' || *l->p > '9')
			return syntax(l, "bad number");
		while (l->p < l->end && *l->p >= '0' && *l->p <= '9')
			l->p++;
	}
	if (l->p < l->end && (*l->p == 'e' || *l->p == 'E')) {
		l->p++;
		if (l->p < l->end && (*l->p == '+' || *l->p == '-'))
			l->p++;
		if (l->p >= l->end || *l->p < '0' || *l->p > '9')
			return syntax(l, "bad number");
		while (l->p < l->end && *l->p >= '0' && *l->p <= '9')
			l->p++;
	}
	if ((size_t)(l->p - s) >= sizeof(tmp)) {
		l->p = s;
		return syntax(l, "number too long");
	}
	memcpy(tmp, s, (size_t)(l->p - s));
	tmp[l->p - s] = '\0';
	*v = strtod(tmp, NULL);
	return 0;
}

static int
word(struct lex *l, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(l->end - l->p) < n || memcmp(l->p, w, n) != 0)
		return syntax(l, "expected a string, number, true, false or "
		    "null");
	l->p += n;
	return 0;
}

enum { F_SYSTEM, F_SETTING, F_RECALL, F_P50, NFIELDS };
static const char *const fields[NFIELDS] = {
	"system", "setting", "recall", "p50_ms"
};

void
peer_free(struct peer *p)
{
	free(p->system);
	free(p->setting);
	p->system = p->setting = NULL;
}

int
peer_parse(const char *line, size_t len, struct peer *p, char *err,
    size_t errlen)
{
	struct lex l;
	int seen[NFIELDS] = { 0 }, f;
	char *key;
	double v = 0;

	l.start = l.p = (const unsigned char *)line;
	l.end = l.p + len;
	l.err = err;
	l.errlen = errlen;
	memset(p, 0, sizeof(*p));
	skip_ws(&l);
	if (l.p == l.end)
		return 0;
	if (*l.p != '{')
		return syntax(&l, "expected '{'");
	l.p++;
	skip_ws(&l);
	if (l.p < l.end && *l.p == '}')
		l.p++;
	else
		for (;;) {
			skip_ws(&l);
			key = NULL;
			if (string(&l, &key) != 0)
				goto bad;
			for (f = 0; f < NFIELDS && strcmp(key, fields[f]) != 0;
			    f++)
				;
			free(key);
			if (f < NFIELDS && seen[f]++) {
				fail(&l, "duplicate \"%s\"", fields[f]);
				goto bad;
			}
			skip_ws(&l);
			if (l.p >= l.end || *l.p != ':') {
				syntax(&l, "expected ':'");
				goto bad;
			}
			l.p++;
			skip_ws(&l);
			if (l.p >= l.end) {
				syntax(&l, "expected a value");
				goto bad;
			}
			switch (*l.p) {
			case '"':
				if (f == F_SYSTEM || f == F_SETTING) {
					if (string(&l, f == F_SYSTEM ?
					    &p->system : &p->setting) != 0)
						goto bad;
				} else if (f < NFIELDS) {
					fail(&l, "\"%s\" must be a number",
					    fields[f]);
					goto bad;
				} else if (string(&l, NULL) != 0)
					goto bad;
				break;
			case '{':
			case '[':
				syntax(&l, "nested arrays and objects are not "
				    "supported");
				goto bad;
			case 't': case 'f': case 'n':
				if (f < NFIELDS) {
					fail(&l, "\"%s\" must be a %s",
					    fields[f], f <= F_SETTING ?
					    "string" : "number");
					goto bad;
				}
				if (word(&l, *l.p == 't' ? "true" :
				    *l.p == 'f' ? "false" : "null") != 0)
					goto bad;
				break;
			default:
				if (number(&l, &v) != 0)
					goto bad;
				if (f == F_SYSTEM || f == F_SETTING) {
					fail(&l, "\"%s\" must be a string",
					    fields[f]);
					goto bad;
				}
				if (f == F_RECALL)
					p->recall = v;
				else if (f == F_P50)
					p->p50_ms = v;
			}
			skip_ws(&l);
			if (l.p < l.end && *l.p == ',') {
				l.p++;
				continue;
			}
			if (l.p < l.end && *l.p == '}') {
				l.p++;
				break;
			}
			syntax(&l, "expected ',' or '}'");
			goto bad;
		}
	skip_ws(&l);
	if (l.p != l.end) {
		syntax(&l, "text after the object");
		goto bad;
	}
	for (f = 0; f < NFIELDS; f++)
		if (!seen[f] && f != F_SETTING) {
			fail(&l, "missing \"%s\"", fields[f]);
			goto bad;
		}
	if (p->system[0] == '\0') {
		fail(&l, "\"system\" is empty");
		goto bad;
	}
	if (!(p->recall >= 0 && p->recall <= 1)) {
		fail(&l, "\"recall\" %g out of range 0..1", p->recall);
		goto bad;
	}
	if (!(p->p50_ms > 0 && isfinite(p->p50_ms))) {
		fail(&l, "\"p50_ms\" %g is not above 0", p->p50_ms);
		goto bad;
	}
	return 1;
bad:
	peer_free(p);
	return -1;
}

struct peer *
peers_read(const char *path, size_t *n)
{
	struct peer *v = NULL, p;
	char *line = NULL, err[160];
	size_t cap = 0, lcap = 0, lineno = 0, i, nsys = 0;
	ssize_t len;
	FILE *fp;
	int r;

	if ((fp = fopen(path, "r")) == NULL)
		die_errno("%s: open", path);
	*n = 0;
	errno = 0;
	while ((len = getline(&line, &lcap, fp)) != -1) {
		lineno++;
		if (len > 0 && line[len - 1] == '\n')
			len--;
		r = peer_parse(line, (size_t)len, &p, err, sizeof(err));
		if (r < 0)
			die("%s: line %zu: %s", path, lineno, err);
		if (r == 0)
			continue;
		for (i = 0; i < *n && strcmp(v[i].system, p.system) != 0; i++)
			;
		if (i == *n && ++nsys > PEERS_MAX_SYSTEMS)
			die("%s: line %zu: more than %d systems", path, lineno,
			    PEERS_MAX_SYSTEMS);
		if (*n == cap) {
			struct peer *nv;

			cap = cap ? 2 * cap : 16;
			if (cap > SIZE_MAX / sizeof(*v) ||
			    (nv = realloc(v, cap * sizeof(*v))) == NULL)
				die("out of memory");
			v = nv;
		}
		v[(*n)++] = p;
	}
	if (ferror(fp))
		die_errno("%s: read", path);
	fclose(fp);
	free(line);
	if (*n == 0)
		die("%s: no points", path);
	return v;
}
