/* report.c: the accounting of a simulate run, and its summary.
 *
 * Every decision is counted three ways: in the totals, under the part of
 * the policy it names (the part with the least remaining: on a denial one
 * that denied, since a part denies a cost n exactly when its remaining is
 * below n), and under its key, found in an open-addressing table (FNV-1a,
 * linear probing, at most half full). With --svg every decision is also kept
 * (16 bytes each) for the picture. The summary ranks keys by denials.
 * Then bytes as strings, for every command: in JSON, and in messages. */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void cli_report_init(cli_report *r, const sluice_policy *p, int keep_events) {
    memset(r, 0, sizeof *r);
    r->policy = p;
    r->keep_events = keep_events;
}

static uint64_t fnv1a(const char *b, size_t n) {
    uint64_t h = 14695981039346656037u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)b[i]) * 1099511628211u;
    return h;
}

/* Doubles the slot table (or makes the first): 0, or -1. */
static int grow_slots(cli_report *r) {
    size_t n = r->n_slots ? r->n_slots * 2 : 1024;
    uint32_t *slots = calloc(n, sizeof *slots);
    if (!slots) return -1;
    for (size_t k = 0; k < r->n_keys; k++) {
        size_t i = fnv1a(r->keys[k].key, r->keys[k].key_len) & (n - 1);
        while (slots[i]) i = (i + 1) & (n - 1);
        slots[i] = (uint32_t)k + 1;
    }
    free(r->slots);
    r->slots = slots;
    r->n_slots = n;
    return 0;
}

/* The key's entry, added when new; NULL when out of memory. */
static cli_key *key_of(cli_report *r, const char *key, size_t key_len) {
    if (2 * (r->n_keys + 1) > r->n_slots && grow_slots(r) != 0) return NULL;
    size_t i = fnv1a(key, key_len) & (r->n_slots - 1);
    for (; r->slots[i]; i = (i + 1) & (r->n_slots - 1)) {
        cli_key *k = &r->keys[r->slots[i] - 1];
        if (k->key_len == key_len && memcmp(k->key, key, key_len) == 0) return k;
    }
    if (r->n_keys == UINT32_MAX - 1) return NULL;
    if (r->n_keys == r->keys_cap) {
        size_t cap = r->keys_cap ? r->keys_cap * 2 : 256;
        cli_key *keys = realloc(r->keys, cap * sizeof *keys);
        if (!keys) return NULL;
        r->keys = keys;
        r->keys_cap = cap;
    }
    cli_key *k = &r->keys[r->n_keys];
    memset(k, 0, sizeof *k);
    if (!(k->key = malloc(key_len ? key_len : 1))) return NULL;
    memcpy(k->key, key, key_len);
    k->key_len = key_len;
    r->slots[i] = (uint32_t)++r->n_keys;
    return k;
}

static void count(cli_counts *c, const sluice_decision *d) {
    c->requests++;
    if (d->allowed) c->allowed++;
    else c->denied++;
}

int cli_report_add(cli_report *r, int64_t t_ms, const char *key, size_t key_len, const sluice_decision *d) {
    cli_key *k = key_of(r, key, key_len);
    if (!k) return -1;
    if (r->keep_events) {
        if (r->n_events == r->events_cap) {
            size_t cap = r->events_cap ? r->events_cap * 2 : 4096;
            cli_event *e = realloc(r->events, cap * sizeof *e);
            if (!e) return -1;
            r->events = e;
            r->events_cap = cap;
        }
        int64_t rem = d->remaining < 0 ? 0 : d->remaining > SLUICE_LIMIT_MAX ? SLUICE_LIMIT_MAX : d->remaining;
        r->events[r->n_events++] =
            (cli_event){t_ms, (uint32_t)(k - r->keys), (uint32_t)rem | (d->allowed ? CLI_EVENT_ALLOWED : 0)};
    }
    if (r->total.requests == 0 || t_ms < r->t_min_ms) r->t_min_ms = t_ms;
    if (r->total.requests == 0 || t_ms > r->t_max_ms) r->t_max_ms = t_ms;
    count(&r->total, d);
    if (d->part >= 0 && d->part < SLUICE_POLICY_MAX_PARTS) count(&r->parts[d->part], d);
    count(&k->n, d);
    if (d->limit > k->limit) k->limit = d->limit;
    if (!d->enforced) r->not_enforced++;
    if (d->shadow_denied) r->shadow_denied++;
    return 0;
}

/* ---- ranking ---- */

static const cli_report *rank_report; /* qsort has no context argument */
static int rank_by_denied;

static int rank_cmp(const void *pa, const void *pb) {
    const cli_key *a = &rank_report->keys[*(const size_t *)pa], *b = &rank_report->keys[*(const size_t *)pb];
    if (rank_by_denied && a->n.denied != b->n.denied) return a->n.denied > b->n.denied ? -1 : 1;
    if (a->n.requests != b->n.requests) return a->n.requests > b->n.requests ? -1 : 1;
    return a < b ? -1 : a > b; /* the first seen first */
}

size_t *cli_report_rank(const cli_report *r, int by_denied) {
    if (r->n_keys == 0) return NULL;
    size_t *order = malloc(r->n_keys * sizeof *order);
    if (!order) return NULL;
    for (size_t i = 0; i < r->n_keys; i++) order[i] = i;
    rank_report = r;
    rank_by_denied = by_denied;
    qsort(order, r->n_keys, sizeof *order, rank_cmp);
    return order;
}

/* ---- the summary ---- */

static void put_counts(FILE *f, int json, const cli_counts *c) {
    if (json)
        fprintf(f, "\"requests\":%" PRId64 ",\"allowed\":%" PRId64 ",\"denied\":%" PRId64, c->requests, c->allowed,
                c->denied);
    else
        fprintf(f, "requests=%" PRId64 " allowed=%" PRId64 " denied=%" PRId64, c->requests, c->allowed, c->denied);
}

/* The i-th part's text, as in SPEC: "shadow " first for a shadow part. */
static void part_config(const sluice_policy *p, size_t i, char *buf, size_t len) {
    size_t n = 0;
    if (sluice_policy_part_shadow(p, i)) n = (size_t)snprintf(buf, len, "shadow ");
    if (sluice_config_format(sluice_policy_part(p, i), buf + n, len - n) < 0) buf[0] = 0;
}

int cli_report_summary(const cli_report *r, FILE *f, int json, size_t top) {
    size_t *order = cli_report_rank(r, 1);
    if (!order && r->n_keys > 0) return -1;
    size_t n_top = top == 0 || top > r->n_keys ? r->n_keys : top;
    cli_counts rest = {0, 0, 0};
    for (size_t i = n_top; i < r->n_keys; i++) {
        const cli_counts *c = &r->keys[order[i]].n;
        rest.requests += c->requests;
        rest.allowed += c->allowed;
        rest.denied += c->denied;
    }
    size_t n_parts = sluice_policy_n_parts(r->policy);
    char config[256];
    int64_t n_verbs = r->verbs[CLI_VERB_PEEK] + r->verbs[CLI_VERB_REFUND] + r->verbs[CLI_VERB_RESET];

    if (json) {
        fputc('{', f);
        put_counts(f, 1, &r->total);
        fprintf(f, ",\"keys\":%zu,\"not_enforced\":%" PRId64 ",\"shadow_denied\":%" PRId64 ",\"peeks\":%" PRId64
                   ",\"refunds\":%" PRId64 ",\"resets\":%" PRId64 ",\"parts\":[",
                r->n_keys, r->not_enforced, r->shadow_denied, r->verbs[CLI_VERB_PEEK], r->verbs[CLI_VERB_REFUND],
                r->verbs[CLI_VERB_RESET]);
        for (size_t i = 0; i < n_parts; i++) {
            part_config(r->policy, i, config, sizeof config);
            fprintf(f, "%s{\"part\":%zu,\"config\":", i ? "," : "", i);
            cli_put_json_bytes(f, config, strlen(config));
            fputc(',', f);
            put_counts(f, 1, &r->parts[i]);
            fputc('}', f);
        }
        fputs("],\"most_denied\":[", f);
        for (size_t i = 0; i < n_top; i++) {
            const cli_key *k = &r->keys[order[i]];
            fputs(i ? ",{\"key\":" : "{\"key\":", f);
            cli_put_json_bytes(f, k->key, k->key_len);
            fputc(',', f);
            put_counts(f, 1, &k->n);
            fputc('}', f);
        }
        fprintf(f, "],\"other_keys\":{\"keys\":%zu,", r->n_keys - n_top);
        put_counts(f, 1, &rest);
        fputs("}}\n", f);
    } else {
        put_counts(f, 0, &r->total);
        fprintf(f, " keys=%zu", r->n_keys);
        if (r->not_enforced) fprintf(f, " not_enforced=%" PRId64, r->not_enforced);
        if (r->shadow_denied) fprintf(f, " shadow_denied=%" PRId64, r->shadow_denied);
        if (n_verbs)
            fprintf(f, " peeks=%" PRId64 " refunds=%" PRId64 " resets=%" PRId64, r->verbs[CLI_VERB_PEEK],
                    r->verbs[CLI_VERB_REFUND], r->verbs[CLI_VERB_RESET]);
        fputc('\n', f);
        for (size_t i = 0; i < n_parts; i++) {
            part_config(r->policy, i, config, sizeof config);
            fprintf(f, "part=%zu ", i);
            put_counts(f, 0, &r->parts[i]);
            fprintf(f, " config=%s\n", config);
        }
        for (size_t i = 0; i < n_top; i++) {
            const cli_key *k = &r->keys[order[i]];
            fputs("key=", f);
            fwrite(k->key, 1, k->key_len, f);
            fputc(' ', f);
            put_counts(f, 0, &k->n);
            fputc('\n', f);
        }
        if (n_top < r->n_keys) {
            fprintf(f, "other_keys=%zu ", r->n_keys - n_top);
            put_counts(f, 0, &rest);
            fputc('\n', f);
        }
    }
    free(order);
    return 0;
}

void cli_report_free(cli_report *r) {
    for (size_t i = 0; i < r->n_keys; i++) free(r->keys[i].key);
    free(r->keys);
    free(r->slots);
    free(r->events);
    memset(r, 0, sizeof *r);
}

/* ---- bytes as strings ---- */

int cli_utf8_len(const unsigned char *s, size_t n) {
    int len = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || (size_t)len > n || (len == 2 && s[0] < 0xc2) || (len == 4 && s[0] > 0xf4)) return 0;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (len == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0; /* overlong, surrogate */
    if (len == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;   /* overlong, > U+10FFFF */
    return len;
}

void cli_put_json_bytes(FILE *f, const char *b, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        const unsigned char *u = (const unsigned char *)b + i;
        int len = cli_utf8_len(u, n - i);
        if (len == 1 && (*u == '"' || *u == '\\')) fprintf(f, "\\%c", *u);
        else if (len == 1 && (*u < 0x20 || *u == 0x7f)) fprintf(f, "\\u%04x", *u);
        else if (len == 0) fprintf(f, "\\u%04x", *u);
        else fwrite(u, 1, (size_t)len, f);
        i += len ? (size_t)len : 1;
    }
    fputc('"', f);
}

void cli_put_quoted(FILE *f, const char *b, size_t n) {
    enum { QUOTE_MAX = 64 };
    fputc('"', f);
    for (size_t i = 0; i < n && i < QUOTE_MAX; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f) fputc(c, f);
        else fprintf(f, "\\x%02x", c);
    }
    fputc('"', f);
    if (n > QUOTE_MAX) fprintf(f, "... (%zu bytes)", n);
}
