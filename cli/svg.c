/* svg.c: the picture of a simulate run (--svg FILE), a self-contained SVG.
 *
 *   title: the policy; a line of totals; a legend
 *   one panel per busy key (the most requests first), on one time axis:
 *     bars     requests per time bin, admitted (green) below denied (red)
 *     line     remaining after the last decision in each bin (blue, right axis)
 *     axes     left: requests per bin; right: remaining (0..the key's
 *              limit); bottom: the trace's time, in the unit of its ticks
 *   the time axis's title under the last panel
 *
 * Its size does not grow with the trace: at most about 100 bins a panel.
 * Time bins and ticks are round durations (1, 2, 5, 10, 15, 30 of a unit),
 * aligned on multiples of themselves in the trace's time. Presentation
 * attributes only (no CSS, no script, no fonts to fetch), so any viewer
 * draws it; classes name what each part is (panel, admitted, denied,
 * remaining, axis-title, tick). Pixel positions are the only floating point
 * in sluice, and are never decisions. */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- layout, in px ---- */

enum {
    WIDTH = 960,
    LEFT = 78,   /* left axis: tick labels and its title */
    RIGHT = 78,  /* right axis */
    HEAD = 112,  /* title, totals, legend */
    PANEL_TITLE = 26,
    PLOT_H = 120,
    PANEL_GAP = 44, /* tick labels and space under a panel */
    FOOT = 56,
    MAX_BINS = 100,
    KEY_SHOWN_MAX = 60,    /* bytes of a key shown */
    TITLE_SHOWN_MAX = 110, /* bytes of the policy shown */
};
#define PLOT_W (WIDTH - LEFT - RIGHT)
#define PANEL_H (PANEL_TITLE + PLOT_H + PANEL_GAP)

#define FONT "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
#define INK "#1f2328"
#define MUTED "#57606a"
#define GRID "#e6e8eb"
#define AXIS "#8c959f"
#define ADMITTED "#2da44e"
#define DENIED "#cf222e"
#define REMAINING "#0969da"

/* ---- round durations and counts ---- */

static const struct {
    const char *name;
    int64_t ms;
} time_units[] = {{"d", 86400000}, {"h", 3600000}, {"min", 60000}, {"s", 1000}, {"ms", 1}};

/* The least round duration (ms) >= want: 1 2 5 10 20 50 100 200 500 ms,
 * 1 2 5 10 15 30 s, 1 2 5 10 15 30 min, 1 2 3 6 12 h, then 1 2 5 x 10^k d. */
static int64_t round_duration(int64_t want) {
    static const int64_t steps[] = {
        1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 15000, 30000, 60000, 120000, 300000,
        600000, 900000, 1800000, 3600000, 7200000, 10800000, 21600000, 43200000, 86400000,
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (steps[i] >= want) return steps[i];
    for (int64_t p = 86400000;; p *= 10) { /* want < 2^60: 10 * p never overflows */
        if (2 * p >= want) return 2 * p;
        if (5 * p >= want) return 5 * p;
        if (10 * p >= want) return 10 * p;
    }
}

/* The largest unit that divides ms (ms > 0). */
static size_t unit_of(int64_t ms) {
    size_t u = 0;
    while (ms % time_units[u].ms != 0) u++;
    return u;
}

/* The least of 1 2 5 10 20 50 ... >= want (want >= 1). */
static int64_t round_count(int64_t want) {
    for (int64_t p = 1;; p *= 10) {
        if (p >= want) return p;
        if (2 * p >= want) return 2 * p;
        if (5 * p >= want) return 5 * p;
    }
}

static int64_t floor_div(int64_t a, int64_t b) { /* b > 0 */
    int64_t q = a / b;
    return q - (a % b != 0 && a < 0);
}

/* A count for a tick label: 1500, 20k, 3M. */
static void put_count(FILE *f, int64_t v) {
    if (v >= 10000 && v % 1000000 == 0) fprintf(f, "%" PRId64 "M", v / 1000000);
    else if (v >= 10000 && v % 1000 == 0) fprintf(f, "%" PRId64 "k", v / 1000);
    else fprintf(f, "%" PRId64, v);
}

/* ---- text ---- */

/* b[0..n) as XML character data: &, <, >, " escaped; valid UTF-8 as it is;
 * control bytes and bytes that are not UTF-8 as the text \xNN; cut after
 * max bytes with an ellipsis. */
static void put_xml(FILE *f, const char *b, size_t n, size_t max) {
    for (size_t i = 0; i < n;) {
        const unsigned char *u = (const unsigned char *)b + i;
        int len = cli_utf8_len(u, n - i);
        if (i >= max) {
            fputs("\xe2\x80\xa6", f); /* U+2026 */
            return;
        }
        if (len == 1 && *u == '&') fputs("&amp;", f);
        else if (len == 1 && *u == '<') fputs("&lt;", f);
        else if (len == 1 && *u == '>') fputs("&gt;", f);
        else if (len == 1 && *u == '"') fputs("&quot;", f);
        else if (len == 0 || (len == 1 && (*u < 0x20 || *u == 0x7f))) fprintf(f, "\\x%02x", *u);
        else fwrite(u, 1, (size_t)len, f);
        i += len ? (size_t)len : 1;
    }
}

static void put_xml_str(FILE *f, const char *s) {
    put_xml(f, s, strlen(s), (size_t)-1);
}

/* n as a percentage of total, rounded, for a line of totals. */
static int64_t percent(int64_t n, int64_t total) {
    return total ? (n * 100 + total / 2) / total : 0;
}

/* ---- one panel ---- */

typedef struct {
    int64_t admitted, denied;
    int64_t last_remaining; /* -1: no decision in the bin */
} bin;

typedef struct {
    int64_t t0_ms, bin_ms; /* bin i is [t0 + i*bin, t0 + (i+1)*bin) */
    size_t n_bins;
    int64_t tick_ms;  /* between time ticks */
    size_t unit;      /* time_units[unit] labels the ticks */
    int64_t origin;   /* tick labels count from here (0, or the first tick) */
} time_axis;

static double x_of(const time_axis *ax, double t_ms) {
    return LEFT + (t_ms - (double)ax->t0_ms) * PLOT_W / ((double)ax->bin_ms * (double)ax->n_bins);
}

/* The time axis of a run from t_min to t_max (ms). */
static time_axis make_axis(int64_t t_min, int64_t t_max) {
    time_axis ax;
    int64_t span = t_max - t_min; /* <= 2^62 */
    ax.bin_ms = round_duration(span / MAX_BINS + 1);
    ax.t0_ms = floor_div(t_min, ax.bin_ms) * ax.bin_ms;
    ax.n_bins = (size_t)(floor_div(t_max - ax.t0_ms, ax.bin_ms) + 1);
    int64_t width = ax.bin_ms * (int64_t)ax.n_bins;
    ax.tick_ms = round_duration(width / 8 + 1);
    ax.unit = unit_of(ax.tick_ms);
    /* labels of more than 7 digits (times far from 0, as epoch ms) count
     * from the first tick instead; the axis title says from where */
    int64_t first = floor_div(ax.t0_ms + ax.tick_ms - 1, ax.tick_ms) * ax.tick_ms;
    int64_t big = (t_max > -t_min ? t_max : -t_min) / time_units[ax.unit].ms;
    ax.origin = big >= 10000000 ? first : 0;
    return ax;
}

static void panel(FILE *f, const cli_key *k, const bin *bins, const time_axis *ax, int y0, int index) {
    int64_t most = 1;
    for (size_t i = 0; i < ax->n_bins; i++)
        if (bins[i].admitted + bins[i].denied > most) most = bins[i].admitted + bins[i].denied;
    int64_t step = round_count((most + 3) / 4), top = (most + step - 1) / step * step;
    int64_t limit = k->limit > 0 ? k->limit : 1;
    int64_t rstep = round_count((limit + 3) / 4), rtop = (limit + rstep - 1) / rstep * rstep;
    const int plot_y = y0 + PANEL_TITLE, base = plot_y + PLOT_H;

    fprintf(f, "<g class=\"panel\" id=\"panel-%d\">\n", index);
    /* the key and its figures */
    fprintf(f, "<text class=\"key\" x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"600\" fill=\"" INK "\">",
            LEFT, y0 + 16);
    put_xml(f, k->key, k->key_len, KEY_SHOWN_MAX);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"" MUTED "\" text-anchor=\"end\">"
               "%" PRId64 " request%s: %" PRId64 " admitted, %" PRId64 " denied (%" PRId64 "%%) \xc2\xb7 limit %" PRId64
               "</text>\n",
            WIDTH - RIGHT, y0 + 16, k->n.requests, k->n.requests == 1 ? "" : "s", k->n.allowed, k->n.denied,
            percent(k->n.denied, k->n.requests), k->limit);

    /* grid and left ticks: requests per bin */
    fprintf(f, "<g class=\"tick\" font-size=\"11\" fill=\"" MUTED "\">\n");
    for (int64_t v = 0; v <= top; v += step) {
        double y = base - (double)v * PLOT_H / (double)top;
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"" GRID "\"/>", LEFT, WIDTH - RIGHT, y,
                y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", LEFT - 6, y + 4);
        put_count(f, v);
        fputs("</text>\n", f);
    }
    /* right ticks: remaining */
    for (int64_t v = 0; v <= rtop; v += rstep) {
        double y = base - (double)v * PLOT_H / (double)rtop;
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" fill=\"" REMAINING "\">", WIDTH - RIGHT + 6, y + 4);
        put_count(f, v);
        fputs("</text>\n", f);
    }
    /* time ticks */
    for (int64_t t = floor_div(ax->t0_ms + ax->tick_ms - 1, ax->tick_ms) * ax->tick_ms;
         t <= ax->t0_ms + ax->bin_ms * (int64_t)ax->n_bins; t += ax->tick_ms) {
        double x = x_of(ax, (double)t);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"" AXIS "\"/>", x, x, base, base + 4);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%" PRId64 "</text>\n", x, base + 16,
                (t - ax->origin) / time_units[ax->unit].ms);
    }
    fputs("</g>\n", f);
    fprintf(f, "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"" AXIS "\"/>\n", LEFT,
            WIDTH - RIGHT, base, base);

    /* axis titles */
    char per[48];
    snprintf(per, sizeof per, "%" PRId64 " %s", ax->bin_ms / time_units[unit_of(ax->bin_ms)].ms,
             time_units[unit_of(ax->bin_ms)].name);
    fprintf(f, "<text class=\"axis-title\" transform=\"translate(%d,%d) rotate(-90)\" font-size=\"12\" "
               "fill=\"" MUTED "\" text-anchor=\"middle\">requests per %s</text>\n",
            LEFT - 46, plot_y + PLOT_H / 2, per);
    fprintf(f, "<text class=\"axis-title\" transform=\"translate(%d,%d) rotate(90)\" font-size=\"12\" "
               "fill=\"" REMAINING "\" text-anchor=\"middle\">remaining</text>\n",
            WIDTH - RIGHT + 50, plot_y + PLOT_H / 2);

    /* bars: admitted below denied, one group per bin with a tooltip */
    double bw = (double)PLOT_W / (double)ax->n_bins, gap = bw > 4 ? 1 : 0;
    fputs("<g class=\"bars\">\n", f);
    for (size_t i = 0; i < ax->n_bins; i++) {
        const bin *b = &bins[i];
        if (b->admitted + b->denied == 0) continue;
        double x = LEFT + (double)i * bw + gap / 2, ha = (double)b->admitted * PLOT_H / (double)top,
               hd = (double)b->denied * PLOT_H / (double)top;
        if (b->admitted && ha < 1.5) ha = 1.5; /* one request stays visible */
        if (b->denied && hd < 1.5) hd = 1.5;
        int64_t t = ax->t0_ms + (int64_t)i * ax->bin_ms;
        fprintf(f, "<g><title>t=%" PRId64 "..%" PRId64 " ms: %" PRId64 " admitted, %" PRId64
                   " denied; remaining %" PRId64 " after the last</title>",
                t, t + ax->bin_ms - 1, b->admitted, b->denied, b->last_remaining);
        if (b->admitted)
            fprintf(f, "<rect class=\"admitted\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"" ADMITTED
                       "\"/>",
                    x, base - ha, bw - gap, ha);
        if (b->denied)
            fprintf(f, "<rect class=\"denied\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"" DENIED
                       "\"/>",
                    x, base - ha - hd, bw - gap, hd);
        fputs("</g>\n", f);
    }
    fputs("</g>\n", f);

    /* remaining: a point at each bin with decisions, joined */
    fputs("<polyline class=\"remaining\" fill=\"none\" stroke=\"" REMAINING "\" stroke-width=\"1.5\" "
          "stroke-linejoin=\"round\" points=\"",
          f);
    for (size_t i = 0, first = 1; i < ax->n_bins; i++) {
        if (bins[i].last_remaining < 0) continue;
        fprintf(f, "%s%.2f,%.2f", first ? "" : " ", LEFT + ((double)i + 0.5) * bw,
                base - (double)bins[i].last_remaining * PLOT_H / (double)rtop);
        first = 0;
    }
    fputs("\"/>\n<g class=\"remaining-points\" fill=\"" REMAINING "\">", f);
    for (size_t i = 0; i < ax->n_bins; i++)
        if (bins[i].last_remaining >= 0)
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2\"/>", LEFT + ((double)i + 0.5) * bw,
                    base - (double)bins[i].last_remaining * PLOT_H / (double)rtop);
    fputs("</g>\n</g>\n", f);
}

/* ---- the document ---- */

/* The legend's three entries on the baseline y, from x. */
static void legend(FILE *f, int x, int y) {
    fputs("<g class=\"legend\" font-size=\"12\" fill=\"" INK "\">\n", f);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"" ADMITTED "\"/>"
               "<text x=\"%d\" y=\"%d\">admitted</text>\n",
            x, y - 10, x + 18, y);
    x += 96;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"" DENIED "\"/>"
               "<text x=\"%d\" y=\"%d\">denied</text>\n",
            x, y - 10, x + 18, y);
    x += 84;
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"" REMAINING "\" stroke-width=\"1.5\"/>"
               "<circle cx=\"%d\" cy=\"%d\" r=\"2\" fill=\"" REMAINING "\"/>"
               "<text x=\"%d\" y=\"%d\">remaining after the last decision in a bin (right axis)</text>\n",
            x, x + 22, y - 4, y - 4, x + 11, y - 4, x + 30, y);
    fputs("</g>\n", f);
}

int cli_svg_write(const cli_report *r, FILE *f, const char *spec, size_t max_panels) {
    size_t *order = cli_report_rank(r, 0);
    if (!order && r->n_keys > 0) return -1;
    size_t n_panels = r->n_keys < max_panels ? r->n_keys : max_panels;
    time_axis ax = make_axis(r->t_min_ms, r->t_max_ms);
    bin *bins = n_panels ? calloc(n_panels * ax.n_bins, sizeof *bins) : NULL;
    if (n_panels && !bins) {
        free(order);
        return -1;
    }
    for (size_t i = 0; i < n_panels * ax.n_bins; i++) bins[i].last_remaining = -1;
    for (size_t e = 0; e < r->n_events; e++) {
        const cli_event *ev = &r->events[e];
        size_t p = 0;
        while (p < n_panels && order[p] != ev->key) p++;
        if (p == n_panels) continue;
        bin *b = &bins[p * ax.n_bins + (size_t)floor_div(ev->t_ms - ax.t0_ms, ax.bin_ms)];
        if (ev->remaining & CLI_EVENT_ALLOWED) b->admitted++;
        else b->denied++;
        b->last_remaining = ev->remaining & ~CLI_EVENT_ALLOWED;
    }

    int height = HEAD + (int)(n_panels ? n_panels : 1) * PANEL_H + FOOT;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"" FONT "\">\n<title>sluice simulate: ",
            WIDTH, height, WIDTH, height);
    put_xml_str(f, spec);
    fprintf(f, "</title>\n<desc>Requests over the trace's time for its busiest keys: admitted and denied per time "
               "bin, and what remains after the last decision of each bin.</desc>\n"
               "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
            WIDTH, height);
    /* the policy as the title, smaller as it grows (a composite of 8 parts
     * is long); the whole of it is in <title> */
    size_t spec_len = strlen(spec);
    fprintf(f, "<text class=\"title\" x=\"%d\" y=\"36\" font-size=\"%d\" font-weight=\"600\" fill=\"" INK "\">",
            LEFT, spec_len <= 64 ? 20 : spec_len <= 84 ? 16 : 13);
    put_xml(f, spec, spec_len, TITLE_SHOWN_MAX);
    fprintf(f, "</text>\n<text class=\"totals\" x=\"%d\" y=\"60\" font-size=\"13\" fill=\"" MUTED "\">"
               "%" PRId64 " request%s: %" PRId64 " admitted, %" PRId64 " denied (%" PRId64 "%%), %zu key%s",
            LEFT, r->total.requests, r->total.requests == 1 ? "" : "s", r->total.allowed, r->total.denied,
            percent(r->total.denied, r->total.requests), r->n_keys, r->n_keys == 1 ? "" : "s");
    if (r->not_enforced) fprintf(f, ", %" PRId64 " not enforced", r->not_enforced);
    if (n_panels == r->n_keys) fputs(" \xc2\xb7 every key below", f);
    else fprintf(f, " \xc2\xb7 the %zu with the most requests below", n_panels);
    fputs("</text>\n", f);
    legend(f, LEFT, 92);

    if (n_panels == 0)
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" fill=\"" MUTED "\" text-anchor=\"middle\">"
                   "no requests in the trace</text>\n",
                WIDTH / 2, HEAD + PANEL_H / 2);
    for (size_t p = 0; p < n_panels; p++)
        panel(f, &r->keys[order[p]], &bins[p * ax.n_bins], &ax, HEAD + (int)p * PANEL_H, (int)p + 1);

    /* the time axis's title, under the last panel */
    fprintf(f, "<text class=\"axis-title\" id=\"time-axis-title\" x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"" MUTED
               "\" text-anchor=\"middle\">",
            LEFT + PLOT_W / 2, height - FOOT + 4);
    if (ax.origin) fprintf(f, "time in the trace since t=%" PRId64 " ms (%s)", ax.origin, time_units[ax.unit].name);
    else fprintf(f, "time in the trace (%s)", time_units[ax.unit].name);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"" MUTED "\" text-anchor=\"end\">"
               "sluice %s</text>\n</svg>\n",
            WIDTH - RIGHT, height - 16, sluice_version());
    free(bins);
    free(order);
    return 0;
}
