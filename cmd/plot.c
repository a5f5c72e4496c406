/*
 * plot.c - the recall/latency plot of plot.h as SVG 1.1.
 *
 * Everything is placed in absolute pixels with text-anchor and explicit
 * baselines (no dominant-baseline, no CSS, no fonts to fetch), the subset
 * that rsvg-convert and browsers draw alike.  Label placement needs text
 * widths the file cannot measure, so they are estimated from the number
 * of characters at a width per character a little above that of common
 * sans-serif faces; labels are placed greedily, frontier points first,
 * at the first of a few positions around the point that overlaps no
 * marker, no earlier label and stays inside the axes.  A point whose label
 * fits nowhere keeps it only as its tooltip (<title>).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "plot.h"

#define FONT		"sans-serif"
#define CHAR_W		0.60	/* estimated advance per character, in em */
#define LABEL_PX	10.0
#define TICK_PX		11.0
#define AXIS_PX		13.0
#define LEGEND_PX	12.0
#define MARKER_R	4.5
#define LEGEND_CHARS	32	/* longer series names are shortened */

static const char *const colours[] = {
	"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9",
	"#000000", "#8c564b",
};
/* The same hues darker, for labels: small text needs more contrast. */
static const char *const text_colours[] = {
	"#005a8c", "#a84400", "#00704f", "#9c4f82", "#9a6200", "#2a7fb0",
	"#000000", "#6e4239",
};
#define NCOLOURS	(sizeof(colours) / sizeof(colours[0]))
#define COLOUR(i)	(((i) + (i) / NCOLOURS) % NCOLOURS)
#define NSHAPES		7

struct box {
	double x0, y0, x1, y1;
};

/* A piece of a frontier line, in pixels. */
struct seg {
	double x0, y0, x1, y1;
};

struct frame {
	double left, top, right, bottom;	/* the axes, in pixels */
	double lx0, lx1;			/* log10 of the x range */
	double y0, y1;				/* the y range */
	double ystep;				/* between y ticks */
};

/* Characters of a UTF-8 string (continuation bytes not counted). */
static size_t
text_chars(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	return n;
}

static double
text_width(const char *s, double px)
{
	return (double)text_chars(s) * CHAR_W * px;
}

/*
 * Text content or attribute value: the five XML specials escaped, and
 * what XML 1.0 cannot hold (control characters, bytes that are not UTF-8)
 * written as '?'.  At most max characters, the last of them "..." when
 * the text is longer (max 0: no limit).
 */
static void
put_text(struct out *o, const char *s, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n, chars = 0, total = text_chars(s);

	for (; *p != '\0'; p += n) {
		if (max > 0 && total > max && chars == max - 3) {
			out_printf(o, "...");
			return;
		}
		chars++;
		n = utf8_len(p, strlen((const char *)p));
		if (n == 0) {
			out_printf(o, "?");
			n = 1;
			continue;
		}
		switch (*p) {
		case '&': out_printf(o, "&amp;"); break;
		case '<': out_printf(o, "&lt;"); break;
		case '>': out_printf(o, "&gt;"); break;
		case '"': out_printf(o, "&quot;"); break;
		case '\'': out_printf(o, "&apos;"); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				out_printf(o, "?");
			else
				out_write(o, p, n);
		}
	}
}

static void
put_label(struct out *o, double x, double y, double px, const char *anchor,
    const char *attrs, const char *s, size_t max)
{
	out_printf(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" "
	    "text-anchor=\"%s\"%s%s>", x, y, px, anchor, attrs[0] ? " " : "",
	    attrs);
	put_text(o, s, max);
	out_printf(o, "</text>\n");
}

static double
px_x(const struct frame *f, double x)
{
	return f->left + (log10(x) - f->lx0) / (f->lx1 - f->lx0) *
	    (f->right - f->left);
}

static double
px_y(const struct frame *f, double y)
{
	return f->bottom - (y - f->y0) / (f->y1 - f->y0) * (f->bottom - f->top);
}

static int
usable(const struct plot_point *pt)
{
	return isfinite(pt->x) && isfinite(pt->y) && pt->x > 0;
}

/* A tick value in milliseconds as a short label: 0.05, 0.2, 1, 20. */
static void
fmt_ms(char *buf, size_t len, double v)
{
	int dec = v >= 1 ? 0 : (int)-floor(log10(v) + 1e-9);

	if (v >= 1e5 || v < 1e-4)
		snprintf(buf, len, "%g", v);
	else
		snprintf(buf, len, "%.*f", dec, v);
}

/*
 * The marker of series i at (x, y): one of NSHAPES shapes in one of
 * NCOLOURS colours, filled for the first NCOLOURS series and open after.
 */
static void
put_marker(struct out *o, size_t i, double x, double y)
{
	const char *c = colours[COLOUR(i)];
	char style[96];
	double r = MARKER_R;

	snprintf(style, sizeof(style), "fill=\"%s\" stroke=\"%s\" "
	    "stroke-width=\"1.2\"", i < NCOLOURS ? c : "#ffffff", c);
	switch (i % NSHAPES) {
	case 0:
		out_printf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" %s/>",
		    x, y, r, style);
		break;
	case 1:
		out_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
		    "height=\"%.1f\" %s/>", x - r * 0.85, y - r * 0.85,
		    r * 1.7, r * 1.7, style);
		break;
	case 2:
		out_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" %s/>",
		    x, y - r * 1.1, x + r, y + r * 0.75, x - r, y + r * 0.75,
		    style);
		break;
	case 3:
		out_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f "
		    "%.1fZ\" %s/>", x, y - r * 1.2, x + r, y, x, y + r * 1.2,
		    x - r, y, style);
		break;
	case 4:
		out_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" %s/>",
		    x, y + r * 1.1, x + r, y - r * 0.75, x - r, y - r * 0.75,
		    style);
		break;
	case 5:
		out_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f "
		    "%.1f\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>",
		    x - r, y - r, x + r, y + r, x - r, y + r, x + r, y - r, c);
		break;
	default:
		out_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f "
		    "%.1f\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>",
		    x - r * 1.2, y, x + r * 1.2, y, x, y - r * 1.2, x,
		    y + r * 1.2, c);
		break;
	}
}

static int
overlap(const struct box *a, const struct box *b)
{
	return a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 &&
	    b->y0 < a->y1;
}

/* Whether segment s crosses box b (Liang-Barsky clipping). */
static int
seg_hits(const struct seg *s, const struct box *b)
{
	double dx = s->x1 - s->x0, dy = s->y1 - s->y0, t0 = 0, t1 = 1, r;
	double pp[4] = { -dx, dx, -dy, dy };
	double qq[4] = { s->x0 - b->x0, b->x1 - s->x0, s->y0 - b->y0,
	    b->y1 - s->y0 };
	int i;

	for (i = 0; i < 4; i++) {
		if (pp[i] == 0) {
			if (qq[i] < 0)
				return 0;
			continue;
		}
		r = qq[i] / pp[i];
		if (pp[i] < 0) {
			if (r > t1)
				return 0;
			if (r > t0)
				t0 = r;
		} else {
			if (r < t0)
				return 0;
			if (r < t1)
				t1 = r;
		}
	}
	return 1;
}

/* Every usable point of the plot, flattened, with its pixel position. */
struct dot {
	size_t s, i;		/* series and index in it */
	double x, y;		/* pixels */
	int front;		/* on its group's frontier */
};

static int
cmp_dot_front(const void *a, const void *b)
{
	const struct dot *p = a, *q = b;

	if (p->front != q->front)
		return q->front - p->front;
	if (p->s != q->s)
		return p->s < q->s ? -1 : 1;
	return p->i < q->i ? -1 : p->i > q->i;
}

static int
cmp_dot_x(const void *a, const void *b)
{
	const struct dot *p = a, *q = b;

	/* Ascending latency; at equal latency the higher recall first. */
	if (p->x != q->x)
		return p->x < q->x ? -1 : 1;
	return p->y < q->y ? -1 : p->y > q->y;
}

/*
 * Marks the frontier of group g among dots[0..n) and draws it: solid dark
 * grey for group 0 (the plot's own points), else dashed in the colour of
 * the group's first series.  Appends its pieces to segs[*nsegs] (room
 * for n in all).
 */
static void
frontier(struct out *o, const struct plot *p, struct dot *dots, size_t n,
    int g, struct seg *segs, size_t *nsegs)
{
	struct dot *d = xmallocarray(n > 0 ? n : 1, sizeof(*d));
	size_t m = 0, i, first = SIZE_MAX;
	double best = INFINITY;		/* pixel y: smaller is better */
	double px = 0, py = 0;		/* the previous vertex */
	int started = 0;

	for (i = 0; i < p->nseries; i++)
		if (p->series[i].group == g) {
			if (first == SIZE_MAX)
				first = i;
		}
	for (i = 0; i < n; i++)
		if (p->series[dots[i].s].group == g)
			d[m++] = dots[i];
	qsort(d, m, sizeof(*d), cmp_dot_x);
	for (i = 0; i < m; i++) {
		size_t j;

		if (d[i].y >= best)
			continue;
		best = d[i].y;
		for (j = 0; j < n; j++)
			if (dots[j].s == d[i].s && dots[j].i == d[i].i)
				dots[j].front = 1;
		if (started) {
			segs[*nsegs].x0 = px;
			segs[*nsegs].y0 = py;
			segs[*nsegs].x1 = d[i].x;
			segs[*nsegs].y1 = d[i].y;
			(*nsegs)++;
		}
		px = d[i].x;
		py = d[i].y;
		if (!started) {
			out_printf(o, "<path fill=\"none\" stroke=\"%s\" "
			    "stroke-width=\"1.6\" stroke-opacity=\"0.8\"%s "
			    "d=\"M", g != 0 ?
			    colours[COLOUR(first)] : "#444444", g != 0 ?
			    " stroke-dasharray=\"5 3\"" : "");
			started = 1;
		} else
			out_printf(o, " L");
		out_printf(o, "%.1f %.1f", d[i].x, d[i].y);
	}
	if (started)
		out_printf(o, "\"/>\n");
	free(d);
}

/*
 * Picks a place for the label of dot d: a box that stays inside the axes
 * and overlaps no marker, no placed label and none of segs[0..nsegs).
 * Returns 0 if none fits.
 */
static int
place(const struct frame *f, const struct dot *dots, size_t n,
    const struct box *placed, size_t nplaced, const struct seg *segs,
    size_t nsegs, const struct dot *d, const char *label, double *tx,
    double *ty, const char **anchor, struct box *got)
{
	/* Offsets of the box's anchor point: right, left, above, below,
	   then the four diagonals, then the same farther out. */
	static const struct { double dx, dy; int a; } cand[] = {
		{ 7, 3.5, 0 }, { -7, 3.5, 2 }, { 0, -8, 1 }, { 0, 15, 1 },
		{ 6, -6, 0 }, { 6, 13, 0 }, { -6, -6, 2 }, { -6, 13, 2 },
		{ 14, 3.5, 0 }, { -14, 3.5, 2 }, { 0, -16, 1 }, { 0, 23, 1 },
	};
	static const char *const anchors[] = { "start", "middle", "end" };
	double w = text_width(label, LABEL_PX), h = LABEL_PX;
	size_t c, j;

	for (c = 0; c < sizeof(cand) / sizeof(cand[0]); c++) {
		struct box b;
		double x = d->x + cand[c].dx, y = d->y + cand[c].dy;
		int ok = 1;

		b.x0 = cand[c].a == 0 ? x : cand[c].a == 1 ? x - w / 2 : x - w;
		b.x1 = b.x0 + w;
		b.y0 = y - h * 0.8;
		b.y1 = y + h * 0.25;
		if (b.x0 < f->left + 2 || b.x1 > f->right - 2 ||
		    b.y0 < f->top + 2 || b.y1 > f->bottom - 2)
			continue;
		for (j = 0; ok && j < n; j++) {
			struct box m = { dots[j].x - MARKER_R - 1,
			    dots[j].y - MARKER_R - 1, dots[j].x + MARKER_R + 1,
			    dots[j].y + MARKER_R + 1 };
			ok = !overlap(&b, &m);
		}
		for (j = 0; ok && j < nplaced; j++)
			ok = !overlap(&b, &placed[j]);
		for (j = 0; ok && j < nsegs; j++)
			ok = !seg_hits(&segs[j], &b);
		if (ok) {
			*tx = x;
			*ty = y;
			*anchor = anchors[cand[c].a];
			*got = b;
			return 1;
		}
	}
	return 0;
}

/* Ranges, in data units, that hold every usable point with a margin. */
static void
ranges(const struct plot *p, struct frame *f)
{
	static const double steps[] = { 0.001, 0.002, 0.005, 0.01, 0.02,
	    0.05, 0.1, 0.2, 0.25 };
	double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY;
	double ymax = 1, span, pad, step = 0.25, lowest;
	size_t s, i;

	for (s = 0; s < p->nseries; s++)
		for (i = 0; i < p->series[s].n; i++) {
			const struct plot_point *pt = &p->series[s].pts[i];

			if (!usable(pt))
				continue;
			if (pt->x < xmin)
				xmin = pt->x;
			if (pt->x > xmax)
				xmax = pt->x;
			if (pt->y < ymin)
				ymin = pt->y;
			if (pt->y > ymax)
				ymax = pt->y;
		}
	if (!isfinite(xmin)) {		/* nothing to draw */
		xmin = 0.1;
		xmax = 10;
		ymin = 0.9;
	}
	f->lx0 = log10(xmin);
	f->lx1 = log10(xmax);
	if (f->lx1 - f->lx0 < 1) {	/* at least a decade */
		double mid = (f->lx0 + f->lx1) / 2;

		f->lx0 = mid - 0.5;
		f->lx1 = mid + 0.5;
	}
	pad = 0.07 * (f->lx1 - f->lx0);
	f->lx0 -= pad;
	f->lx1 += pad;

	/* Recall from a little below the lowest point to 1 (or above). */
	lowest = ymin;
	span = ymax - ymin;
	if (span < 0.01)
		span = 0.01;
	ymin -= 0.06 * span;
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if ((ymax - ymin) / steps[i] <= 10) {
			step = steps[i];
			break;
		}
	f->ystep = step;
	f->y0 = floor(ymin / step + 1e-9) * step;
	if (f->y0 < 0 && lowest >= 0)
		f->y0 = 0;
	f->y1 = ceil(ymax / step - 1e-9) * step;
	/* Room above the top points for their markers and labels. */
	if (f->y1 - ymax < 0.03 * (f->y1 - f->y0))
		f->y1 = ymax + 0.045 * (f->y1 - f->y0);
}

static void
axes(struct out *o, const struct plot *p, const struct frame *f)
{
	static const int sets[3][10] = {
		{ 1, 0 }, { 1, 2, 5, 0 }, { 1, 2, 3, 4, 5, 6, 7, 8, 9, 0 },
	};
	double step = f->ystep, v, x, y;
	int e, m, set, nlab, dec, every = 1;
	char buf[32];

	/* Labelled x ticks: decades, then 1-2-5 or every sub-decade when
	   the range is too short to show three. */
	for (set = 0; set < 3; set++) {
		nlab = 0;
		for (e = (int)floor(f->lx0); e <= (int)ceil(f->lx1); e++)
			for (m = 0; sets[set][m] != 0; m++) {
				v = log10(sets[set][m]) + e;
				nlab += v >= f->lx0 && v <= f->lx1;
			}
		if (nlab >= 3 || set == 2)
			break;
	}
	if (set == 0 && f->lx1 - f->lx0 < 3)
		set = 1;	/* a 1-2-5 grid reads better up to 3 decades */
	/* Over many decades, labels at every few decades and no sub-ticks. */
	if (f->lx1 - f->lx0 > 8)
		every = (int)ceil((f->lx1 - f->lx0) / 8);
	out_printf(o, "<g stroke=\"#888888\" stroke-width=\"1\">\n");
	for (e = (int)floor(f->lx0); e <= (int)ceil(f->lx1); e++)
		for (m = 1; m <= 9; m++) {
			v = log10(m) + e;
			if (v < f->lx0 || v > f->lx1 || (every > 1 &&
			    (m > 1 || e % every != 0)))
				continue;
			x = px_x(f, pow(10, v));
			out_printf(o, "<path d=\"M%.1f %.1fv%d\"/>\n", x,
			    f->bottom, m == 1 ? 6 : 3);
		}
	out_printf(o, "</g>\n<g font-family=\"%s\" fill=\"#222222\">\n",
	    FONT);
	for (e = (int)floor(f->lx0); e <= (int)ceil(f->lx1); e++)
		for (m = 0; sets[set][m] != 0; m++) {
			v = log10(sets[set][m]) + e;
			if (v < f->lx0 || v > f->lx1 || e % every != 0)
				continue;
			x = px_x(f, pow(10, v));
			out_printf(o, "<path d=\"M%.1f %.1fV%.1f\" stroke=\""
			    "%s\" stroke-width=\"1\"/>\n", x, f->top, f->bottom,
			    sets[set][m] == 1 ? "#dddddd" : "#eeeeee");
			fmt_ms(buf, sizeof(buf), sets[set][m] * pow(10, e));
			put_label(o, x, f->bottom + 19, TICK_PX, "middle", "",
			    buf, 0);
		}

	/* y ticks on the step's grid, with the step's decimals. */
	for (dec = 1; dec < 4 && fabs(step * pow(10, dec) -
	    round(step * pow(10, dec))) > 1e-6; dec++)
		;
	for (v = f->y0; v <= f->y1 + 1e-9; v += step) {
		y = px_y(f, v);
		out_printf(o, "<path d=\"M%.1f %.1fH%.1f\" stroke=\"#e4e4e4\" "
		    "stroke-width=\"1\"/>\n<path d=\"M%.1f %.1fh-5\" "
		    "stroke=\"#888888\" stroke-width=\"1\"/>\n", f->left, y,
		    f->right, f->left, y);
		snprintf(buf, sizeof(buf), "%.*f", dec, v);
		put_label(o, f->left - 8, y + 4, TICK_PX, "end", "", buf, 0);
	}
	out_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\""
	    "%.1f\" fill=\"none\" stroke=\"#666666\" stroke-width=\"1\"/>\n",
	    f->left, f->top, f->right - f->left, f->bottom - f->top);
	if (p->xlabel != NULL)
		put_label(o, (f->left + f->right) / 2, f->bottom + 44, AXIS_PX,
		    "middle", "", p->xlabel, 0);
	if (p->ylabel != NULL) {
		y = (f->top + f->bottom) / 2;
		out_printf(o, "<text x=\"0\" y=\"0\" font-size=\"%g\" "
		    "text-anchor=\"middle\" transform=\"translate(%.1f %.1f) "
		    "rotate(-90)\">", AXIS_PX, f->left - 52, y);
		put_text(o, p->ylabel, 0);
		out_printf(o, "</text>\n");
	}
	out_printf(o, "</g>\n");
}

/*
 * The legend right of the axes: each series' marker and name, then the
 * frontier lines drawn (own: group 0's, peers: any other group's).
 */
static void
legend(struct out *o, const struct plot *p, const struct frame *f, int own,
    int peers)
{
	double x = f->right + 18, y = f->top + 8, row = 19, fpx = LEGEND_PX;
	size_t s, rows = p->nseries + (own != 0) + (peers != 0);

	/* Many series: closer rows in a smaller font, all inside the frame. */
	if (rows > 0 && row * (double)rows > f->bottom - f->top - 8) {
		row = (f->bottom - f->top - 8) / (double)rows;
		if (fpx > row * 0.7)
			fpx = floor(row * 0.7 * 2) / 2;
	}
	out_printf(o, "<g font-family=\"%s\" fill=\"#222222\">\n", FONT);
	for (s = 0; s < p->nseries; s++, y += row) {
		put_marker(o, s, x + 8, y);
		out_printf(o, "\n");
		put_label(o, x + 22, y + fpx / 3, fpx, "start", "",
		    p->series[s].name, LEGEND_CHARS);
	}
	if (own) {
		out_printf(o, "<path d=\"M%.1f %.1fh18\" stroke=\"#444444\" "
		    "stroke-width=\"1.6\"/>\n", x - 1, y);
		put_label(o, x + 22, y + fpx / 3, fpx, "start", "",
		    "Pareto frontier", 0);
		y += row;
	}
	if (peers) {
		out_printf(o, "<path d=\"M%.1f %.1fh18\" stroke=\"#444444\" "
		    "stroke-width=\"1.6\" stroke-dasharray=\"5 3\"/>\n",
		    x - 1, y);
		put_label(o, x + 22, y + fpx / 3, fpx, "start", "",
		    own ? "peers' frontiers" : "frontiers", 0);
	}
	out_printf(o, "</g>\n");
}

void
plot_svg(struct out *out, const struct plot *p)
{
	struct frame f;
	struct dot *dots;
	struct box *placed;
	struct seg *segs;
	double lw = 0, w, tpx = 16;
	size_t s, i, n = 0, np = 0, total = 0;
	int g, own = 0, peers = 0, *groups;
	size_t ngroups = 0, k, nsegs = 0;

	for (s = 0; s < p->nseries; s++) {
		total += p->series[s].n;
		w = text_width(p->series[s].name, LEGEND_PX);
		if (text_chars(p->series[s].name) > LEGEND_CHARS)
			w = LEGEND_CHARS * CHAR_W * LEGEND_PX;
		if (w > lw)
			lw = w;
	}
	if (lw < text_width("peers' frontiers", LEGEND_PX))
		lw = text_width("peers' frontiers", LEGEND_PX);
	ranges(p, &f);
	f.left = 84;
	f.top = 52;
	f.right = PLOT_WIDTH - 18 - (lw + 44);
	f.bottom = PLOT_HEIGHT - 64;

	dots = xmallocarray(total > 0 ? total : 1, sizeof(*dots));
	placed = xmallocarray(total > 0 ? total : 1, sizeof(*placed));
	segs = xmallocarray(total > 0 ? total : 1, sizeof(*segs));
	groups = xmallocarray(p->nseries > 0 ? p->nseries : 1,
	    sizeof(*groups));
	for (s = 0; s < p->nseries; s++) {
		for (i = 0; i < p->series[s].n; i++) {
			const struct plot_point *pt = &p->series[s].pts[i];

			if (!usable(pt))
				continue;
			dots[n].s = s;
			dots[n].i = i;
			dots[n].x = px_x(&f, pt->x);
			dots[n].y = px_y(&f, pt->y);
			dots[n].front = 0;
			n++;
		}
		for (k = 0; k < ngroups && groups[k] != p->series[s].group;
		    k++)
			;
		if (k == ngroups)
			groups[ngroups++] = p->series[s].group;
	}

	out_printf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	    "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
	    "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n"
	    "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
	    PLOT_WIDTH, PLOT_HEIGHT, PLOT_WIDTH, PLOT_HEIGHT, PLOT_WIDTH,
	    PLOT_HEIGHT);
	if (p->title != NULL) {
		w = text_width(p->title, tpx);
		if (w > PLOT_WIDTH - 20)
			tpx = tpx * (PLOT_WIDTH - 20) / w;
		if (tpx < 9)
			tpx = 9;
		out_printf(out, "<g font-family=\"%s\" fill=\"#111111\">\n",
		    FONT);
		put_label(out, PLOT_WIDTH / 2.0, 30, floor(tpx * 2) / 2,
		    "middle", "font-weight=\"bold\"", p->title, 0);
		out_printf(out, "</g>\n");
	}
	axes(out, p, &f);

	/* Frontiers under the markers. */
	for (k = 0; k < ngroups; k++) {
		g = groups[k];
		frontier(out, p, dots, n, g, segs, &nsegs);
	}
	for (i = 0; i < n; i++)
		if (dots[i].front && p->series[dots[i].s].group == 0)
			own = 1;
		else if (dots[i].front)
			peers = 1;

	out_printf(out, "<g>\n");
	for (i = 0; i < n; i++) {
		const struct plot_point *pt =
		    &p->series[dots[i].s].pts[dots[i].i];

		/* The title first: browsers take a tooltip from there. */
		out_printf(out, "<g><title>");
		put_text(out, p->series[dots[i].s].name, 0);
		if (pt->label != NULL) {
			out_printf(out, " ");
			put_text(out, pt->label, 0);
		}
		out_printf(out, ": recall %.4f, %.4g ms</title>", pt->y, pt->x);
		put_marker(out, dots[i].s, dots[i].x, dots[i].y);
		out_printf(out, "</g>\n");
	}
	out_printf(out, "</g>\n<g font-family=\"%s\">\n", FONT);
	qsort(dots, n, sizeof(*dots), cmp_dot_front);
	for (i = 0; i < n; i++) {
		const struct plot_point *pt =
		    &p->series[dots[i].s].pts[dots[i].i];
		const char *anchor;
		double tx, ty;
		char fill[32];

		if (pt->label == NULL || pt->label[0] == '\0')
			continue;
		/* Clear of the frontier lines if possible, else across them. */
		if (!place(&f, dots, n, placed, np, segs, nsegs, &dots[i],
		    pt->label, &tx, &ty, &anchor, &placed[np]) &&
		    !place(&f, dots, n, placed, np, NULL, 0, &dots[i],
		    pt->label, &tx, &ty, &anchor, &placed[np]))
			continue;
		np++;
		snprintf(fill, sizeof(fill), "fill=\"%s\"",
		    text_colours[COLOUR(dots[i].s)]);
		put_label(out, tx, ty, LABEL_PX, anchor, fill, pt->label, 0);
	}
	out_printf(out, "</g>\n");
	legend(out, p, &f, own, peers);
	out_printf(out, "</svg>\n");
	free(dots);
	free(placed);
	free(segs);
	free(groups);
}
