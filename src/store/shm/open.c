/* store/shm/open.c: opening a shm store's file, which may be another's or
 * not a store at all: checked before anything is locked, read, or
 * written.
 *
 *  1. The file is opened without following a symbolic link and without
 *     blocking (a FIFO, a device), created 0600 when it is not there, and
 *     refused unless it is a regular file of ours that nobody else may
 *     open (so nobody else can hold a lock on it, or write it).
 *  2. One opener at a time reads or sets it up: an flock() waited for at
 *     most SHM_SETUP_WAIT_MS (a set-up takes milliseconds), then
 *     SLUICE_ETIMEDOUT.
 *  3. An empty file, or one whose set-up was cut short (its magic still
 *     SHM_MAGIC_SETUP, written first), is set up: refused when it would be
 *     larger than its filesystem; the parts every lookup reads (header,
 *     counters, bucket heads, the overflow area's head) get their pages at
 *     once (fallocate), so a full filesystem is an error then, not a
 *     SIGBUS later; the magic comes last. Anything else must be a whole
 *     store of this layout: its header's numbers possible, its size theirs,
 *     its store time in range; else it is refused, unchanged.
 *  4. A file last used before the host rebooted (another boot id) starts
 *     fresh, set up anew with its geometry: no process of that boot is
 *     left to have it mapped.
 * The descriptor stays open: new keys' pages are asked for through it. */
#define _GNU_SOURCE
#include "shm.h"

#include "pair.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* The host's boot id: 0, or -1 with errno (then the file's state cannot be
 * told from a reboot's, and nothing may be reset on that account). */
static int read_boot_id(char out[40]) {
    memset(out, 0, 40);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f) return -1;
    int ok = fgets(out, 40, f) != NULL;
    fclose(f);
    out[strcspn(out, "\n")] = 0;
    if (!ok || !out[0]) {
        errno = EIO;
        return -1;
    }
    return 0;
}

int sluice__shm_allocate(shm_store *m, uint64_t off, uint64_t len) {
    if (fallocate(m->fd, 0, (off_t)off, (off_t)len) == 0 || errno == EOPNOTSUPP || errno == ENOSYS) return 0;
    if (errno == ENOSPC || errno == EDQUOT)
        sluice__store_errf(&m->head, "shm:%s: its filesystem is full: no room for the pages of a new key",
                           m->path);
    else
        sluice__store_errf(&m->head, "shm:%s: cannot have pages for a new key: %s", m->path, strerror(errno));
    return -1;
}

/* The URL parameters shm: takes (kinds.c reads them). */
enum { P_MAX_KEYS, P_ON_FULL, P_KEY_BYTES, P_STATE_BYTES, P_OVERFLOW_BYTES };
static const char *const on_full_names[] = {"evict", "refuse", NULL}; /* in sluice_on_full's order */
const sluice__param sluice__shm_params[SHM_N_PARAMS] = {
    [P_MAX_KEYS] = {"max_keys", SLUICE__PARAM_INT, 1, SLUICE_MAX_KEYS_MAX, SHM_MAX_KEYS_DEFAULT, NULL, NULL, NULL,
                    SLUICE__OPT_MAX_KEYS},
    [P_ON_FULL] = {"on_full", SLUICE__PARAM_CHOICE, 0, 0, SLUICE_ON_FULL_EVICT, on_full_names, NULL, NULL,
                   SLUICE__OPT_ON_FULL},
    [P_KEY_BYTES] = {"key_bytes", SLUICE__PARAM_INT, 1, SLUICE_KEY_MAX, SHM_KEY_BYTES_DEFAULT, NULL, NULL, NULL,
                     SLUICE__OPT_NONE},
    [P_STATE_BYTES] = {"state_bytes", SLUICE__PARAM_INT, 16, 1 << 20, SHM_STATE_BYTES_DEFAULT, NULL, NULL, NULL,
                       SLUICE__OPT_NONE},
    [P_OVERFLOW_BYTES] = {"overflow_bytes", SLUICE__PARAM_INT, 0, SHM_OVERFLOW_BYTES_MAX, SHM_OVERFLOW_BYTES_DEFAULT,
                          NULL, NULL, NULL, SLUICE__OPT_NONE},
};
_Static_assert(P_OVERFLOW_BYTES + 1 == SHM_N_PARAMS, "every parameter declared");

/* The geometry the open asks for (what it names, else the defaults). */
typedef struct {
    int64_t max_keys, key_bytes, state_bytes, overflow_bytes;
    int max_keys_given, key_bytes_given, state_bytes_given, overflow_bytes_given;
} shm_params;

static void read_params(const sluice__store_config *cfg, shm_params *sp) {
    sp->max_keys = cfg->value[P_MAX_KEYS];
    sp->key_bytes = cfg->value[P_KEY_BYTES];
    sp->state_bytes = (int64_t)shm_align((uint64_t)cfg->value[P_STATE_BYTES], 16);
    sp->overflow_bytes = cfg->value[P_OVERFLOW_BYTES];
    sp->max_keys_given = (cfg->given >> P_MAX_KEYS) & 1;
    sp->key_bytes_given = (cfg->given >> P_KEY_BYTES) & 1;
    sp->state_bytes_given = (cfg->given >> P_STATE_BYTES) & 1;
    sp->overflow_bytes_given = (cfg->given >> P_OVERFLOW_BYTES) & 1;
    /* an area holds its head and a block at least; whole pages */
    if (sp->overflow_bytes) sp->overflow_bytes = (int64_t)shm_align((uint64_t)sp->overflow_bytes, 4096);
    if (sp->overflow_bytes && sp->overflow_bytes < SHM_OVERFLOW_HEAD + 4096) sp->overflow_bytes = SHM_OVERFLOW_HEAD + 4096;
}

/* Opens path as step 1 above says: the descriptor, or -1 with err. */
static int open_own_file(const char *path, int create, char *err, size_t errlen) {
    int fd = open(path, O_RDWR | (create ? O_CREAT : 0) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd < 0) {
        int e = errno;
        struct stat st;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) slash == dir ? (void)(dir[1] = 0) : (void)(*slash = 0);
        else strcpy(dir, ".");
        if (e == ENOENT && stat(dir, &st) != 0)
            sluice__errf(err, errlen, "shm:%s: the directory it would be in does not exist", path);
        else if (e == ENOENT && !create)
            sluice__errf(err, errlen, "shm:%s: no such file", path);
        else if (e == ELOOP && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            sluice__errf(err, errlen, "shm:%s is a symbolic link: refusing it (name the file itself)", path);
        else if ((e == EACCES || e == EPERM) && lstat(path, &st) == 0 && st.st_uid != geteuid())
            sluice__errf(err, errlen, "shm:%s belongs to uid %u, not to you (uid %u): refusing it", path,
                         (unsigned)st.st_uid, (unsigned)geteuid());
        else
            sluice__errf(err, errlen, "shm:%s: %s", path, strerror(e));
        return -1;
    }
    struct stat st;
    const char *why = NULL;
    char text[160];
    if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "is not a regular file";
    else if (st.st_uid != geteuid())
        snprintf(text, sizeof text, "belongs to uid %u, not to you (uid %u): refusing it", (unsigned)st.st_uid,
                 (unsigned)geteuid()), why = text;
    else if (st.st_mode & 077)
        snprintf(text, sizeof text, "is open to others (mode %04o): it must be 0600", (unsigned)(st.st_mode & 07777)),
            why = text;
    if (why) {
        sluice__errf(err, errlen, "shm:%s %s", path, why);
        close(fd);
        return -1;
    }
    return fd;
}

/* The set-up lock, waited for at most SHM_SETUP_WAIT_MS: 0 or -1. */
static int lock_setup(int fd) {
    struct timespec start, now, pause = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
        if (errno != EWOULDBLOCK && errno != EINTR) return -1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >= SHM_SETUP_WAIT_MS) {
            errno = ETIMEDOUT;
            return -1;
        }
        nanosleep(&pause, NULL);
    }
}

/* Sets the file up with geometry m->g (the set-up lock held). */
static int set_up(shm_store *m, const char boot[40], char *err, size_t errlen) {
    const char *path = m->path;
    struct statvfs vfs;
    if (fstatvfs(m->fd, &vfs) == 0 && vfs.f_blocks && (uint64_t)vfs.f_blocks * vfs.f_frsize < m->g.file_bytes) {
        sluice__errf(err, errlen, "shm:%s would take %llu bytes, more than its whole filesystem (%llu bytes): "
                     "make it with a smaller ?max_keys=N, or put it on a larger filesystem", path,
                     (unsigned long long)m->g.file_bytes, (unsigned long long)vfs.f_blocks * vfs.f_frsize);
        return SLUICE_EINVAL;
    }
    /* the marker first: from here on the file is known for a set-up of ours */
    static shm_file_header marker; /* zero but for the magic and layout */
    memcpy(marker.magic, SHM_MAGIC_SETUP, 8);
    marker.version = SHM_LAYOUT_VERSION;
    marker.header_bytes = SHM_HEADER_BYTES;
    if (ftruncate(m->fd, 0) != 0 || pwrite(m->fd, &marker, sizeof marker, 0) != (ssize_t)sizeof marker ||
        ftruncate(m->fd, (off_t)m->g.file_bytes) != 0) {
        sluice__errf(err, errlen, "shm:%s: cannot size it to %llu bytes: %s", path,
                     (unsigned long long)m->g.file_bytes, strerror(errno));
        return SLUICE_EINVAL;
    }
    int rc = 0;
    if (sluice__shm_allocate(m, 0, m->g.slots_off) ||
        (m->g.overflow_bytes && sluice__shm_allocate(m, m->g.overflow_off, SHM_OVERFLOW_HEAD))) {
        sluice__errf(err, errlen, "%s", sluice_store_errmsg(&m->head));
        sluice__store_errf(NULL, "%s", ""); /* the message is err's now: m goes away */
        rc = SLUICE_ENOMEM;
    }
    if (rc == 0) {
        m->map = mmap(NULL, m->g.file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
        if (m->map == MAP_FAILED) {
            m->map = NULL;
            sluice__errf(err, errlen, "shm:%s: mmap: %s", path, strerror(errno));
            rc = SLUICE_ENOMEM;
        }
    }
    if (rc) {
        if (ftruncate(m->fd, SHM_HEADER_BYTES) != 0) { /* the marker stays: a later open sets it up */
        }
        return rc;
    }
    shm_file_header *f = m->hdr = (shm_file_header *)m->map;
    f->version = SHM_LAYOUT_VERSION;
    f->header_bytes = SHM_HEADER_BYTES;
    f->slot_bytes = m->g.slot_bytes;
    f->slots_per_bucket = m->g.spb;
    f->buckets = m->g.buckets;
    f->key_bytes = m->g.key_bytes;
    f->state_bytes = m->g.state_bytes;
    f->overflow_bytes = m->g.overflow_bytes;
    f->file_bytes = m->g.file_bytes;
    f->hash_kind = sluice__aeshash_available() ? SHM_HASH_AES : SHM_HASH_SIP;
    sluice__random_words(f->aes_key, sizeof f->aes_key / sizeof f->aes_key[0]);
    sluice__random_words(f->seed, sizeof f->seed / sizeof f->seed[0]);
    memcpy(f->boot_id, boot, sizeof f->boot_id);
    atomic_store(&f->now_ms, SLUICE_TIME_MIN_MS);
    if (m->g.overflow_bytes) atomic_store(&shm_overflow(m)->bump, SHM_OVERFLOW_HEAD);
    msync(m->map, m->g.slots_off, MS_SYNC);
    memcpy(f->magic, SHM_MAGIC, 8); /* last: the file is set up */
    return 0;
}

/* Reads and checks the header of a file that is not empty. Returns 0 with
 * *h, 1 when it is a set-up of ours cut short (set it up anew), or an
 * error. */
static int read_header(int fd, const char *path, off_t size, shm_file_header *h, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    ssize_t got = pread(fd, h, sizeof *h, 0);
    if (got >= 8 && memcmp(h->magic, SHM_MAGIC_SETUP, 8) == 0) return 1;
    if (got < 8 || memcmp(h->magic, SHM_MAGIC, 8) != 0) {
        sluice__errf(err, errlen, "shm:%s is not a sluice store (it does not start as one): refusing it", path);
        return SLUICE_EINVAL;
    }
    if (got < (ssize_t)sizeof *h || size < SHM_HEADER_BYTES) {
        sluice__errf(err, errlen, "shm:%s is truncated (%lld bytes)", path, (long long)size);
        return SLUICE_EINVAL;
    }
    if (h->version != SHM_LAYOUT_VERSION || h->header_bytes != SHM_HEADER_BYTES) {
        sluice__errf(err, errlen, "shm:%s has layout version %u; this sluice reads version %d (remove the file: "
                     "it holds only rate-limit counters)", path, h->version, SHM_LAYOUT_VERSION);
        return SLUICE_EINVAL;
    }
    if (h->slots_per_bucket < 1 || h->slots_per_bucket > 64 || h->buckets < 1 || h->buckets > SLUICE_MAX_KEYS_MAX ||
        h->buckets * h->slots_per_bucket > SLUICE_MAX_KEYS_MAX ||
        (h->slots_per_bucket < SHM_BUCKET_SLOTS && h->buckets != 1) || h->key_bytes < 1 ||
        h->key_bytes > SLUICE_KEY_MAX || h->state_bytes < 16 || h->state_bytes > (1u << 20) || h->state_bytes % 16 ||
        (h->overflow_bytes && (h->overflow_bytes < SHM_OVERFLOW_HEAD + 4096 || h->overflow_bytes > SHM_OVERFLOW_BYTES_MAX ||
                               h->overflow_bytes % 4096)) ||
        (h->hash_kind != SHM_HASH_SIP && h->hash_kind != SHM_HASH_AES)) {
        sluice__errf(err, errlen, "shm:%s is damaged (its header's geometry is impossible)", path);
        return SLUICE_EINVAL;
    }
    int64_t t = atomic_load(&h->now_ms);
    if (t < SLUICE_TIME_MIN_MS || t > SLUICE_TIME_MAX_MS) {
        sluice__errf(err, errlen, "shm:%s is damaged (its store time %lld is outside the accepted range)", path,
                     (long long)t);
        return SLUICE_EINVAL;
    }
    return 0;
}

void sluice__shm_close(sluice_store *s) {
    shm_store *m = (shm_store *)s;
    if (m->map) {
        sluice__shm_counters_give(m);
        munmap(m->map, m->g.file_bytes);
    }
    if (m->fd >= 0) close(m->fd);
    sluice__policy_set_free(&m->policies);
    free(m);
}

int sluice__shm_open(const sluice__store_config *cfg, sluice_store **out, char *err, size_t errlen) {
    shm_params want;
    if (cfg->path_len == 0) {
        sluice__errf(err, errlen, "store URL shm:PATH needs a file path");
        return SLUICE_EINVAL;
    }
    if (cfg->path_len >= sizeof((shm_store *)0)->path) {
        sluice__errf(err, errlen, "shm: path of %zu bytes is too long (at most %zu)", cfg->path_len,
                     sizeof((shm_store *)0)->path - 1);
        return SLUICE_EINVAL;
    }
    read_params(cfg, &want);
    int64_t max_keys = want.max_keys;
    int explicit_geometry = want.max_keys_given || want.key_bytes_given || want.state_bytes_given ||
                            want.overflow_bytes_given;
    int rc;
    shm_store *m = calloc(1, sizeof *m);
    if (!m) {
        sluice__errf(err, errlen, "shm: out of memory");
        return SLUICE_ENOMEM;
    }
    m->fd = -1;
    memcpy(m->path, cfg->path, cfg->path_len);
    const char *path = m->path;
    if (!sluice__cas16_lock_free()) {
        sluice__errf(err, errlen, "shm:%s: this CPU has no 16-byte compare-and-swap instruction, which "
                     "the shm store's lock-free updates need", path);
        rc = SLUICE_EINVAL;
        goto out;
    }
    m->policies.item_size = sizeof(shm_policy);
    m->policies.init = sluice__shm_policy_init;
    m->policies.word_offset = offsetof(shm_policy, tweak);
    m->policies.ctx = m;
    rc = SLUICE_EINVAL;
    if ((m->fd = open_own_file(path, !cfg->must_exist, err, errlen)) < 0) goto out;
    if (lock_setup(m->fd) != 0) {
        int timed_out = errno == ETIMEDOUT;
        sluice__errf(err, errlen, timed_out ? "shm:%s: another process has held it locked for set-up for %d ms"
                                            : "shm:%s: cannot lock it for set-up (%d ms)", path, SHM_SETUP_WAIT_MS);
        if (timed_out) rc = SLUICE_ETIMEDOUT;
        goto out;
    }
    char boot[40];
    if (read_boot_id(boot) != 0) { /* never taken for a reboot: that would reset a live table */
        sluice__errf(err, errlen, "shm:%s: cannot read the host's boot id (/proc/sys/kernel/random/boot_id): %s",
                     path, strerror(errno));
        goto unlock;
    }
    struct stat st;
    if (fstat(m->fd, &st) != 0) {
        sluice__errf(err, errlen, "shm:%s: %s", path, strerror(errno));
        goto unlock;
    }
    shm_file_header h;
    int fresh = st.st_size == 0, rebooted = 0;
    if (!fresh) {
        int r = read_header(m->fd, path, st.st_size, &h, err, errlen);
        if (r < 0) {
            rc = r;
            goto unlock;
        }
        fresh = r == 1;
    }
    if (!fresh) {
        if (h.hash_kind == SHM_HASH_AES && !sluice__aeshash_available()) {
            sluice__errf(err, errlen, "shm:%s hashes keys with AES instructions, which this CPU lacks "
                         "(the file belongs to the host that made it)", path);
            goto unlock;
        }
        shm_geometry_of(&m->g, h.buckets * h.slots_per_bucket, h.key_bytes, h.state_bytes, h.overflow_bytes);
        if (h.slot_bytes != m->g.slot_bytes || h.slots_per_bucket != m->g.spb || h.buckets != m->g.buckets ||
            h.file_bytes != m->g.file_bytes || (uint64_t)st.st_size != m->g.file_bytes) {
            sluice__errf(err, errlen, "shm:%s is truncated or damaged (%lld bytes, its header says %llu)", path,
                         (long long)st.st_size, (unsigned long long)m->g.file_bytes);
            goto unlock;
        }
        shm_geometry asked;
        shm_geometry_of(&asked, want.max_keys_given ? (uint64_t)max_keys : h.buckets * h.slots_per_bucket,
                        want.key_bytes_given ? (uint32_t)want.key_bytes : h.key_bytes,
                        want.state_bytes_given ? (uint32_t)want.state_bytes : h.state_bytes,
                        want.overflow_bytes_given ? (uint64_t)want.overflow_bytes : h.overflow_bytes);
        if (explicit_geometry && (asked.buckets != m->g.buckets || asked.spb != m->g.spb ||
                                  asked.key_bytes != m->g.key_bytes || asked.state_bytes != m->g.state_bytes ||
                                  asked.overflow_bytes != m->g.overflow_bytes)) {
            sluice__errf(err, errlen, "shm:%s was made with max_keys=%llu key_bytes=%u state_bytes=%u "
                         "overflow_bytes=%llu", path, (unsigned long long)(h.buckets * h.slots_per_bucket),
                         h.key_bytes, h.state_bytes, (unsigned long long)h.overflow_bytes);
            goto unlock;
        }
        if (strncmp(h.boot_id, boot, sizeof boot) != 0) rebooted = 1; /* its times mean nothing now */
    } else {
        shm_geometry_of(&m->g, (uint64_t)max_keys, (uint32_t)want.key_bytes, (uint32_t)want.state_bytes,
                        (uint64_t)want.overflow_bytes);
    }
    if (fresh && cfg->must_exist) { /* empty, or a set-up cut short */
        sluice__errf(err, errlen, "shm:%s holds no store (it was never set up)", path);
        goto unlock;
    }
    if (fresh || rebooted) {
        if ((rc = set_up(m, boot, err, errlen)) != 0) goto unlock;
    } else {
        m->map = mmap(NULL, m->g.file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
        if (m->map == MAP_FAILED) {
            m->map = NULL;
            sluice__errf(err, errlen, "shm:%s: mmap: %s", path, strerror(errno));
            rc = SLUICE_ENOMEM;
            goto unlock;
        }
        m->hdr = (shm_file_header *)m->map;
    }
    m->heads = m->map + m->g.heads_off;
    m->slots = m->map + m->g.slots_off;
    m->on_full = (sluice_on_full)cfg->value[P_ON_FULL];
    m->aes = m->hdr->hash_kind == SHM_HASH_AES;
    sluice__shm_counters_take(m);
    rc = 0;
unlock:
    flock(m->fd, LOCK_UN);
out:
    if (rc) {
        sluice__shm_close(&m->head);
        return rc;
    }
    *out = &m->head;
    return 0;
}
