/*
 * plot.h - a recall/latency scatter plot as plain SVG 1.1.
 *
 * The caller fills series of points (x a latency in milliseconds, drawn on
 * a log scale; y a recall, linear) and plot_write() draws them with one
 * colour and marker per series, a label beside each point where it fits,
 * a legend, and the Pareto frontier of each group of series (the points
 * no other point of the group beats in both latency and recall) as a
 * line: solid for group 0, the plot's own, dashed for the others.
 * Text is drawn in the generic sans-serif family; nothing is external.
 */
#ifndef TQ_CMD_PLOT_H
#define TQ_CMD_PLOT_H

#include <stddef.h>

struct plot_point {
	double x;		/* > 0 and finite */
	double y;		/* finite; recall in 0..1 */
	const char *label;	/* the setting, e.g. "p8 o2"; may be NULL */
};

struct plot_series {
	const char *name;	/* in the legend */
	int group;		/* series of one group share a frontier */
	const struct plot_point *pts;
	size_t n;
};

struct plot {
	const char *title;
	const char *xlabel, *ylabel;
	const struct plot_series *series;
	size_t nseries;
};

/* The SVG canvas in pixels (also the size rsvg-convert renders). */
#define PLOT_WIDTH	960
#define PLOT_HEIGHT	600

/*
 * Writes the plot as one SVG document to an output of common.h that the
 * caller opened with out_open() and commits with out_commit() (so that a
 * failure anywhere leaves no partial file).  Points that are not finite
 * or have x <= 0 are left out.
 */
struct out;
void plot_svg(struct out *o, const struct plot *p);

#endif /* TQ_CMD_PLOT_H */
