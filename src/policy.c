/* policy.c: a policy is a name and 1..8 configurations that must all admit.
 *
 * A policy is immutable once made, so any number of threads, limiters and
 * stores share it without locks. Each part is validated and precomputed
 * (sluice__params) when the policy is made; deciding over the parts, all or
 * nothing, is composite.c's. The text form is "config; config; ...", each
 * part as sluice_config_parse reads it, with positions in messages counted
 * from the start of the whole text. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Policy objects are numbered so stores can recognise one cheaply. */
static atomic_uint_fast64_t next_serial = 1;

/* 1..64 bytes of letters, digits and "-_.:" (names appear in HTTP headers). */
static int check_name(const char *name, char *err, size_t errlen) {
    size_t n = strlen(name);
    if (n == 0 || n > SLUICE_POLICY_NAME_MAX) {
        sluice__errf(err, errlen, "policy name is %zu bytes long (it must be 1..%d)", n,
                     SLUICE_POLICY_NAME_MAX);
        return SLUICE_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == ':')
            continue;
        sluice__errf(err, errlen,
                     "policy name has byte 0x%02x at %zu (allowed: letters, digits and \"-_.:\")",
                     (unsigned char)ch, i);
        return SLUICE_EINVAL;
    }
    return 0;
}

int sluice_policy_name_check(const char *name, char *err, size_t errlen) {
    if (!name) {
        sluice__errf(err, errlen, "policy name is NULL");
        return SLUICE_EINVAL;
    }
    return check_name(name, err, errlen);
}

bool sluice_policy_delays(const sluice_policy *p) {
    for (size_t i = 0; p && i < p->n_parts; i++)
        if (p->algo[i]->flags & SLUICE__ALGO_DELAYS) return true;
    return false;
}

/* Validates everything, then allocates: nothing is allocated on error. */
static int make(const char *name, const sluice_config *parts, const bool *shadow, size_t n_parts,
                sluice_policy **out, char *err, size_t errlen) {
    sluice_policy tmp;
    memset(&tmp, 0, sizeof tmp);
    int rc = check_name(name, err, errlen);
    if (rc != 0) return rc;
    if (n_parts < 1 || n_parts > SLUICE_POLICY_MAX_PARTS) {
        sluice__errf(err, errlen, "a policy has 1..%d parts, not %zu", SLUICE_POLICY_MAX_PARTS,
                     n_parts);
        return SLUICE_EINVAL;
    }
    memcpy(tmp.name, name, strlen(name) + 1);
    tmp.n_parts = n_parts;
    for (size_t i = 0; i < n_parts; i++) {
        rc = sluice__params_init(&parts[i], &tmp.params[i], err, errlen);
        if (rc != 0) return rc;
        tmp.parts[i] = parts[i];
        tmp.algo[i] = sluice__algo_of(parts[i].algorithm);
        tmp.shadow[i] = shadow && shadow[i];
        tmp.n_shadow += tmp.shadow[i];
    }
    sluice_policy *p = malloc(sizeof *p);
    if (p == NULL) {
        sluice__errf(err, errlen, "out of memory");
        return SLUICE_ENOMEM;
    }
    tmp.serial = atomic_fetch_add_explicit(&next_serial, 1, memory_order_relaxed);
    tmp.max_cost = SLUICE_LIMIT_MAX; /* the least limit of the enforced parts */
    for (size_t i = 0; i < n_parts; i++)
        if (!tmp.shadow[i] && tmp.params[i].limit < tmp.max_cost) tmp.max_cost = tmp.params[i].limit;
    *p = tmp;
    *out = p;
    return 0;
}

int sluice_policy_new(const char *name, const sluice_config *parts, size_t n_parts,
                      sluice_policy **out) {
    return sluice_policy_new_shadow(name, parts, NULL, n_parts, out);
}

int sluice_policy_new_shadow(const char *name, const sluice_config *parts, const bool *shadow, size_t n_parts,
                             sluice_policy **out) {
    if (name == NULL || parts == NULL || out == NULL) return SLUICE_EINVAL;
    return make(name, parts, shadow, n_parts, out, NULL, 0);
}

int sluice_policy_parse(const char *name, const char *text, sluice_policy **out, char *err,
                        size_t errlen) {
    if (name == NULL || text == NULL || out == NULL) {
        sluice__errf(err, errlen, "%s is NULL", name == NULL ? "name" : text == NULL ? "text" : "out");
        return SLUICE_EINVAL;
    }
    int rc = check_name(name, err, errlen);
    if (rc != 0) return rc;

    sluice_config parts[SLUICE_POLICY_MAX_PARTS];
    bool shadow[SLUICE_POLICY_MAX_PARTS];
    size_t n = 0, len = strlen(text), begin = 0;
    for (;;) {
        const char *semi = memchr(text + begin, ';', len - begin);
        size_t end = semi != NULL ? (size_t)(semi - text) : len, i = begin;
        while (i < end && (text[i] == ' ' || text[i] == '\t')) i++;
        if (n == SLUICE_POLICY_MAX_PARTS) {
            sluice__errf(err, errlen, "at %zu: more than %d configurations (a policy has 1..%d)", i,
                         SLUICE_POLICY_MAX_PARTS, SLUICE_POLICY_MAX_PARTS);
            return SLUICE_EINVAL;
        }
        if (i == end) {
            sluice__errf(err, errlen, "at %zu: empty configuration (expected \"config; config; ...\")",
                         i);
            return SLUICE_EINVAL;
        }
        /* "shadow" first: a shadow part */
        shadow[n] = end - i > 7 && !memcmp(text + i, "shadow", 6) && (text[i + 6] == ' ' || text[i + 6] == '\t');
        rc = sluice__config_parse_span(text, shadow[n] ? i + 6 : begin, end, &parts[n], err, errlen);
        if (rc != 0) return rc;
        n++;
        if (semi == NULL) break;
        begin = end + 1;
    }
    return make(name, parts, shadow, n, out, err, errlen);
}

int sluice_policy_format(const sluice_policy *p, char *buf, size_t len) {
    if (p == NULL || (buf == NULL && len > 0)) return SLUICE_EINVAL;
    size_t total = 0;
    for (size_t i = 0; i < p->n_parts; i++) {
        char part[160]; /* a configuration's text is at most ~70 bytes */
        int n = sluice_config_format(&p->parts[i], part, sizeof part);
        if (n < 0) return n;
        for (const char *s = i > 0 ? (p->shadow[i] ? "; shadow " : "; ") : p->shadow[i] ? "shadow " : "";
             *s != '\0'; s++, total++)
            if (total + 1 < len) buf[total] = *s;
        for (int k = 0; k < n; k++, total++)
            if (total + 1 < len) buf[total] = part[k];
    }
    if (len > 0) buf[total < len ? total : len - 1] = '\0';
    return (int)total;
}

const char *sluice_policy_name(const sluice_policy *p) { return p != NULL ? p->name : NULL; }

size_t sluice_policy_n_parts(const sluice_policy *p) { return p != NULL ? p->n_parts : 0; }

const sluice_config *sluice_policy_part(const sluice_policy *p, size_t i) {
    return p != NULL && i < p->n_parts ? &p->parts[i] : NULL;
}

bool sluice_policy_part_shadow(const sluice_policy *p, size_t i) {
    return p != NULL && i < p->n_parts && p->shadow[i];
}

void sluice_policy_free(sluice_policy *p) { free(p); }

int sluice__policy_check_cost(const sluice_policy *p, int64_t cost) {
    if (p == NULL) return SLUICE_EINVAL;
    return cost < 1 || cost > p->max_cost ? SLUICE_ECOST : 0;
}

int64_t sluice_policy_max_cost(const sluice_policy *p) {
    return p ? p->max_cost : 0;
}
