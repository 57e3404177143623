/* cli.h: what the files of the sluice tool share. A program, not the
 * library: these names are the tool's own (cli_), and nothing here is
 * installed.
 *
 *   sluice.c  the subcommands, their options and their messages
 *   report.c  simulate's accounting of a run: counts per key and per part,
 *             the summary (--summary), the decisions kept for the picture;
 *             and JSON strings
 *   svg.c     simulate's picture of a run (--svg)
 */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <sluice.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- "report.c" ---- */

/* Counts of decisions. */
typedef struct {
    int64_t requests, allowed, denied;
} cli_counts;

/* One key of a trace. */
typedef struct {
    char *key; /* its bytes, as in the trace (not NUL-terminated) */
    size_t key_len;
    cli_counts n;
    int64_t limit; /* the greatest limit its decisions named */
} cli_key;

/* One decision kept for the picture (16 bytes: 1M requests take 16 MB). */
typedef struct {
    int64_t t_ms;
    uint32_t key;       /* index in keys[] */
    uint32_t remaining; /* <= SLUICE_LIMIT_MAX < 2^31; bit 31: allowed */
} cli_event;
#define CLI_EVENT_ALLOWED 0x80000000u

/* A run's accounting. Not thread-safe (simulate is one thread). */
typedef struct {
    const sluice_policy *policy;
    cli_counts total;
    cli_counts parts[SLUICE_POLICY_MAX_PARTS]; /* by the part a decision named */
    int64_t not_enforced;
    cli_key *keys; /* in the order they first appear */
    size_t n_keys, keys_cap;
    uint32_t *slots; /* open addressing: index in keys[] + 1; 0 is empty */
    size_t n_slots;  /* a power of two, at least twice n_keys */
    cli_event *events; /* every decision, when kept */
    size_t n_events, events_cap;
    int keep_events;
    int64_t t_min_ms, t_max_ms; /* of the decisions counted */
} cli_report;

/* An empty report for policy p (which must outlive it); keep_events keeps
 * every decision for cli_svg_write. */
void cli_report_init(cli_report *r, const sluice_policy *p, int keep_events);
/* Counts one decision for key[0..key_len) at t_ms. 0, or -1 out of memory. */
int cli_report_add(cli_report *r, int64_t t_ms, const char *key, size_t key_len, const sluice_decision *d);
/* The indices of the keys, the most denied first (then the most requests,
 * then the first seen) when by_denied, else the most requests first (then
 * the first seen). malloc'd (the caller frees it), NULL when out of memory
 * or there are no keys. */
size_t *cli_report_rank(const cli_report *r, int by_denied);
/* Writes the summary: totals, each part, and the top keys most denied
 * (every key when top is 0), as "name=value" lines or one JSON object.
 * 0, or -1 out of memory. */
int cli_report_summary(const cli_report *r, FILE *f, int json, size_t top);
void cli_report_free(cli_report *r);

/* The length of the valid UTF-8 sequence at s[0..n) (1..4), or 0. */
int cli_utf8_len(const unsigned char *s, size_t n);
/* b[0..n) as a JSON string: valid UTF-8 as it is, '"', '\\' and control
 * bytes escaped, and a byte that is not UTF-8 as \u00XX (the JSON stays
 * valid; such a byte and the character U+00XX then look alike). */
void cli_put_json_bytes(FILE *f, const char *b, size_t n);

/* ---- "svg.c" ---- */

/* Writes the picture of the run in r (kept with keep_events) as a
 * self-contained SVG document: one panel for each of the max_panels keys
 * with the most requests. spec: the policy's text, for the title. 0, or -1
 * out of memory (nothing sensible was written). */
int cli_svg_write(const cli_report *r, FILE *f, const char *spec, size_t max_panels);

#endif /* SLUICE_CLI_H */
