/* headers.c: a decision as HTTP rate-limit header fields.
 *
 * Writes the fields of the IETF httpapi draft "RateLimit header fields for
 * HTTP" (draft-ietf-httpapi-ratelimit-headers, the RateLimit-Policy /
 * RateLimit pair of named items of versions 08 and later), plus Retry-After
 * (RFC 9110) on a denial:
 *
 *   RateLimit-Policy: "api";q=10;w=1, "api.1";q=1000;w=3600\r\n
 *   RateLimit: "api";r=0;t=1\r\n
 *   Retry-After: 1\r\n
 *
 * Both draft fields are Structured Field Lists (RFC 9651) whose items are
 * sf-strings naming a quota policy (the WG chose String over Token), with
 * integer parameters: q (quota), w (window, seconds), r (remaining quota
 * units), t (seconds). Every duration is rounded UP to whole seconds, so a
 * client that obeys the headers never comes back before the real time. An
 * sf-integer has at most 15 digits: larger values (windows of a very slow
 * refill) are written as 999999999999999.
 *
 * What q and w mean is each algorithm's to say (its descriptor's quota,
 * src/algo/): a window's q is its limit and w its window; a bucket's w the
 * time a drained bucket takes to refill completely (in seconds rounded up,
 * at least 1) and q what refills in w, so that q per w is the rate.
 * t: on a denial, the seconds until this request is admitted (Retry-After's
 * value); when allowed, until the named part is fresh again: its own reset,
 * not the whole policy's (the decision's part_reset_ms). A decision a remote store
 * could not make (enforced false) has no RateLimit field: it knows nothing
 * of what remains.
 *
 * The length is returned as snprintf returns it: the whole text's, whatever
 * len is; a buffer too small holds "" (a header block cut mid-field is not
 * HTTP).
 *
 * Built on the public API (policy accessors) and the algorithms'
 * descriptors; no allocation, no I/O. O(parts) time. Thread-safe: it only
 * reads its arguments. */
#include "algo/algo.h"

#include <string.h>

/* ---- a bounded writer: appends until the buffer would overflow ---- */

typedef struct {
    char *buf;
    size_t len; /* capacity, including the NUL                      */
    size_t pos; /* length of the text so far; in buf while pos < len */
} hdr_writer;

/* Appends while the text and its NUL fit; counts the length either way
 * (once a piece does not fit, no later one does: pos only grows). */
static void put_bytes(hdr_writer *w, const char *s, size_t n) {
    if (w->pos + n < w->len) memcpy(w->buf + w->pos, s, n);
    w->pos += n;
}

static void put_str(hdr_writer *w, const char *s) {
    put_bytes(w, s, strlen(s));
}

#define SF_INTEGER_MAX UINT64_C(999999999999999) /* RFC 9651: 15 digits */

/* A non-negative integer in decimal. */
static void put_uint(hdr_writer *w, uint64_t v) {
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put_bytes(w, tmp + i, sizeof tmp - i);
}

/* The same as an sf-integer: at most SF_INTEGER_MAX. */
static void put_sf_uint(hdr_writer *w, uint64_t v) {
    put_uint(w, v > SF_INTEGER_MAX ? SF_INTEGER_MAX : v);
}

/* An sf-string: DQUOTE, printable ASCII with '"' and '\' escaped, DQUOTE.
 * Policy names are already limited to letters, digits and "-_.:", so the
 * escapes are only a safeguard. suffix >= 1 appends ".suffix" inside the
 * quotes (a composite part's name). */
static void put_sf_name(hdr_writer *w, const char *name, size_t suffix) {
    put_bytes(w, "\"", 1);
    for (const char *c = name; *c; c++) {
        if (*c == '"' || *c == '\\') put_bytes(w, "\\", 1);
        put_bytes(w, c, 1);
    }
    if (suffix > 0) {
        put_bytes(w, ".", 1);
        put_uint(w, suffix);
    }
    put_bytes(w, "\"", 1);
}

/* ---- rounding ---- */

/* ceil(ms / 1000) for ms >= 0 */
static uint64_t ceil_seconds(int64_t ms) {
    uint64_t u = (uint64_t)ms;
    return u / 1000 + (u % 1000 != 0);
}

/* The quota (q) and window in seconds (w) a configuration advertises: its
 * algorithm's own (algo/), at most an sf-integer's 15 digits. */
static void quota_window(const sluice_config *c, uint64_t *q, uint64_t *w_s) {
    sluice__algo_of(c->algorithm)->quota(c, SF_INTEGER_MAX, q, w_s);
}

/* Printable ASCII only (an sf-string cannot carry anything else). */
static int name_ok(const char *name) {
    if (!name || !*name) return 0;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (*c < 0x20 || *c > 0x7e) return 0;
    return 1;
}

/* ---- the public function ---- */

int sluice_headers_format(const sluice_policy *p, const sluice_decision *d, char *buf, size_t len) {
    if (!p || !d || (!buf && len > 0)) return SLUICE_EINVAL;
    const char *name = sluice_policy_name(p);
    size_t n_parts = sluice_policy_n_parts(p);
    /* A decision that cannot come from this policy: refuse it rather than
     * write headers that lie. */
    size_t n_enforced = 0;
    for (size_t i = 0; i < n_parts; i++) n_enforced += !sluice_policy_part_shadow(p, i);
    if (!name_ok(name) || n_parts < 1 || d->part < 0 || (size_t)d->part >= n_parts ||
        d->remaining < 0 || d->reset_ms < 0 || d->retry_after_ms < 0 || d->part_reset_ms < 0 ||
        d->part_reset_ms > d->reset_ms || (n_enforced && sluice_policy_part_shadow(p, (size_t)d->part)))
        return SLUICE_EINVAL;
    for (size_t i = 0; i < n_parts; i++) {
        const sluice_config *c = sluice_policy_part(p, i);
        if (!c || sluice_config_validate(c, NULL, 0) != 0)
            return SLUICE_EINVAL; /* policies hold valid configurations only */
    }

    hdr_writer w = {buf, len, 0};
    if (n_enforced == 0) { /* shadow parts only: no limit to tell of */
        if (len > 0) buf[0] = 0;
        return 0;
    }

    /* RateLimit-Policy: one item per enforced part, in the policy's order
     * (a shadow part is not a limit the client meets). */
    put_str(&w, "RateLimit-Policy: ");
    for (size_t i = 0, first = 1; i < n_parts; i++) {
        if (sluice_policy_part_shadow(p, i)) continue;
        const sluice_config *c = sluice_policy_part(p, i);
        uint64_t q, w_s;
        quota_window(c, &q, &w_s);
        if (!first) put_str(&w, ", ");
        first = 0;
        put_sf_name(&w, name, i);
        put_str(&w, ";q=");
        put_sf_uint(&w, q);
        put_str(&w, ";w=");
        put_sf_uint(&w, w_s);
    }
    put_str(&w, "\r\n");

    /* RateLimit: the part with the least remaining (d->part). t: on a
     * denial when this request is admitted (as Retry-After); else when
     * that part is fresh again. A decision no store made (enforced false)
     * tells nothing of what remains. */
    if (d->enforced) {
        put_str(&w, "RateLimit: ");
        put_sf_name(&w, name, (size_t)d->part);
        put_str(&w, ";r=");
        put_sf_uint(&w, (uint64_t)d->remaining);
        put_str(&w, ";t=");
        put_sf_uint(&w, ceil_seconds(d->allowed ? d->part_reset_ms : d->retry_after_ms));
        put_str(&w, "\r\n");
    }

    /* Retry-After (delay-seconds) on denials only, rounded up so that it is
     * never earlier than the exact retry_after_ms. */
    if (!d->allowed) {
        put_str(&w, "Retry-After: ");
        put_uint(&w, ceil_seconds(d->retry_after_ms));
        put_str(&w, "\r\n");
    }

    if (w.pos < len) buf[w.pos] = 0;
    else if (len > 0) buf[0] = 0; /* too small: nothing cut in half */
    return (int)w.pos; /* at most 8 parts' worth: a few hundred bytes */
}
