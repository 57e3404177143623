/* http_limit_uv.c: a small HTTP/1.1 server on libuv that rate-limits its
 * clients, deciding through sluice's non-blocking API.
 *
 *   http_limit_uv --listen HOST:PORT --policy SPEC [--store URL] [--name NAME]
 *
 * Every request is answered 200 (admitted) or 429 (denied) under a policy
 * per client: the key is the X-Client request header when there is one,
 * else the client's address. Both answers carry the RateLimit-Policy and
 * RateLimit fields, a 429 Retry-After too (sluice_headers_format). A store
 * that cannot decide (on_error=error) gets 503. --listen HOST:0 picks a
 * free port; the server prints "listening on HOST:PORT" when it is ready.
 * SIGINT or SIGTERM stop it: it stops listening, closes its connections,
 * detaches the store from the loop (a decision still in flight is then
 * cancelled) and exits 0.
 *
 * One request's life. A request's context (its place in its connection's
 * queue) lives from its parse until its answer is written, whatever the
 * store does: memory: and shm: call back before sluice_store_acquire_async
 * returns, a remote store when its reply arrives. Answers go out in the
 * order the requests came (pipelined requests on one connection are
 * parsed, and decided, before earlier answers are written); a connection
 * closed by its client is freed only once every decision it asked for has
 * come back.
 *
 * HTTP: request line, header fields, Content-Length bodies (read and
 * dropped), keep-alive (HTTP/1.1's default; HTTP/1.0 with "Connection:
 * keep-alive"), pipelining. A malformed request gets 400, a request line
 * and header section over 8 KiB (or over 100 fields) 431, another major
 * version 505, Transfer-Encoding 501, and the connection is closed after
 * it. An admitted request of a shaping policy (delay_ms, a leaky bucket)
 * is answered at once. The server never exits on a client's doing. */
#define _GNU_SOURCE
#include <sluice.h>
#include <sluice_uv.h>

#include <ctype.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#define HEADER_MAX 8192            /* request line and header section */
#define FIELDS_MAX 100             /* header fields of one request */
#define IN_MAX (HEADER_MAX + 8192) /* a connection's read buffer */
#define QUEUE_MAX 64               /* requests awaiting their answer; reading pauses beyond */
#define WRITES_MAX 4               /* writes libuv holds for a connection; reading pauses beyond */

/* ------------------------------------------------------------------------ */
/* Types                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct conn conn;

typedef struct {
    sluice_store *store;
    sluice_policy *policy;
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_signal_t sigint, sigterm;
    conn *conns; /* every open connection, for stopping */
    int stopping;
    char *out; /* one flush's answers */
    size_t out_cap;
} server;

/* A request, from its parse until its answer is written. */
typedef struct {
    conn *c;
    int status;      /* 0: the store decides; else the answer (400, 431, ...) */
    int ready;       /* decided: its answer can be written */
    int close_after; /* the connection closes after its answer */
    int head;        /* HEAD: no body */
    int rc;          /* the store's result */
    sluice_decision d;
    char msg[160];   /* the store's message, for a 503 */
} request;

struct conn {
    uv_tcp_t tcp;
    uv_shutdown_t shutdown;
    server *srv;
    conn *prev, *next;
    char addr[64]; /* the client's address: the key without X-Client */
    char in[IN_MAX];
    size_t in_len;
    int64_t body_left;         /* bytes of a body still to drop */
    request q[QUEUE_MAX];      /* a ring: q_head, q_n */
    unsigned q_head, q_n;
    int pending;               /* requests whose decision has not come back */
    int writes;                /* uv_write calls not completed */
    int reading, in_pump;
    int done_parsing;          /* after an error or "Connection: close" */
    int eof;                   /* the client sent all it will */
    int closing;               /* no more reading or writing */
    int handle_closing, closed; /* uv_close called; its callback ran */
};

/* What a request's head said. */
typedef struct {
    const char *key; /* X-Client, in the read buffer; NULL: none */
    size_t key_len;
    int64_t content_length;
    int keep_alive, head;
} parsed;

/* ------------------------------------------------------------------------ */
/* HTTP parsing                                                              */
/* ------------------------------------------------------------------------ */

static int is_tchar(unsigned char ch) {
    return ch && (isalnum(ch) || strchr("!#$%&'*+-.^_`|~", ch));
}

static int name_is(const char *name, size_t len, const char *want) {
    return strlen(want) == len && !strncasecmp(name, want, len);
}

/* The end of the line that starts at b[i] (excluding "\r\n" or "\n"), its
 * next line's start in *next; 0 when no '\n' is found before n. */
static int line_at(const char *b, size_t n, size_t i, size_t *end, size_t *next) {
    const char *nl = memchr(b + i, '\n', n - i);
    if (!nl) return 0;
    *next = (size_t)(nl - b) + 1;
    *end = (size_t)(nl - b);
    if (*end > i && b[*end - 1] == '\r') (*end)--;
    return 1;
}

/* The "Connection" field's tokens. */
static void connection_tokens(const char *v, size_t len, int *close, int *keep) {
    for (size_t i = 0; i < len;) {
        while (i < len && (v[i] == ',' || v[i] == ' ' || v[i] == '\t')) i++;
        size_t s = i;
        while (i < len && v[i] != ',' && v[i] != ' ' && v[i] != '\t') i++;
        if (name_is(v + s, i - s, "close")) *close = 1;
        if (name_is(v + s, i - s, "keep-alive")) *keep = 1;
    }
}

/* Parses the request head at b[0..n): the bytes it takes (blank lines
 * before it included), 0 when it is not all there yet, or minus the status
 * of the error answer. */
static long parse_head(const char *b, size_t n, parsed *r) {
    memset(r, 0, sizeof *r);
    size_t start = 0;
    while (start < n && (b[start] == '\r' || b[start] == '\n')) start++; /* blank lines before: ignored */
    /* the end: an empty line */
    size_t i = start, end, next, head_end = 0;
    while (i < n && line_at(b, n, i, &end, &next)) {
        if (end == i) {
            head_end = next;
            break;
        }
        i = next;
    }
    if (!head_end) return n >= HEADER_MAX ? -431 : 0;
    if (head_end > HEADER_MAX) return -431;

    /* request line: METHOD SP TARGET SP HTTP/D.D */
    line_at(b, n, start, &end, &next);
    const char *p = b + start, *e = b + end;
    const char *m = p;
    while (p < e && is_tchar((unsigned char)*p)) p++;
    size_t mlen = (size_t)(p - m);
    if (mlen == 0 || p == e || *p++ != ' ') return -400;
    const char *t = p;
    while (p < e && (unsigned char)*p > ' ' && *p != 0x7f) p++;
    if (p == t || p == e || *p++ != ' ') return -400;
    if (e - p != 8 || memcmp(p, "HTTP/", 5) || !isdigit((unsigned char)p[5]) || p[6] != '.' ||
        !isdigit((unsigned char)p[7]))
        return -400;
    if (p[5] != '1') return -505;
    int minor = p[7] - '0';
    r->head = mlen == 4 && !memcmp(m, "HEAD", 4);

    /* header fields: NAME ":" OWS VALUE OWS */
    int hosts = 0, fields = 0, close = 0, keep = 0, chunked = 0, lengths = 0;
    for (i = next; i < head_end;) {
        line_at(b, n, i, &end, &next);
        if (end == i) break;
        if (++fields > FIELDS_MAX) return -431;
        const char *name = b + i, *q = name;
        e = b + end;
        while (q < e && is_tchar((unsigned char)*q)) q++;
        size_t name_len = (size_t)(q - name);
        if (name_len == 0 || q == e || *q++ != ':') return -400; /* also an obs-fold, a space before ':' */
        while (q < e && (*q == ' ' || *q == '\t')) q++;
        const char *v = q;
        for (; q < e; q++)
            if (((unsigned char)*q < ' ' && *q != '\t') || *q == 0x7f) return -400; /* a bare CR too */
        while (q > v && (q[-1] == ' ' || q[-1] == '\t')) q--;
        size_t vlen = (size_t)(q - v);
        if (name_is(name, name_len, "host")) {
            hosts++;
        } else if (name_is(name, name_len, "content-length")) {
            int64_t len = 0;
            if (vlen == 0 || vlen > 15) return -400;
            for (size_t k = 0; k < vlen; k++) {
                if (!isdigit((unsigned char)v[k])) return -400;
                len = len * 10 + (v[k] - '0');
            }
            if (lengths++ && r->content_length != len) return -400; /* two that disagree */
            r->content_length = len;
        } else if (name_is(name, name_len, "transfer-encoding")) {
            chunked = 1;
        } else if (name_is(name, name_len, "connection")) {
            connection_tokens(v, vlen, &close, &keep);
        } else if (name_is(name, name_len, "x-client")) {
            if (r->key || vlen == 0 || vlen > SLUICE_KEY_MAX) return -400;
            r->key = v;
            r->key_len = vlen;
        }
        i = next;
    }
    if (hosts > 1 || (minor >= 1 && hosts == 0)) return -400;
    if (chunked) return -501;
    r->keep_alive = minor >= 1 ? !close : keep && !close;
    return (long)head_end;
}

/* ------------------------------------------------------------------------ */
/* Answers                                                                   */
/* ------------------------------------------------------------------------ */

static const char *reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* The Date field's value, made once a second. */
static const char *http_date(void) {
    static time_t last = -1;
    static char text[64];
    time_t now = time(NULL);
    if (now != last) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        last = now;
    }
    return text;
}

/* Writes request q's answer at out (room for 8 KiB); its length. */
static size_t answer(const server *srv, const request *q, char *out) {
    char fields[4096] = "", body[256];
    int status = q->status;
    if (!status) {
        if (q->rc < 0) {
            status = 503;
        } else {
            status = q->d.allowed ? 200 : 429;
            int n = sluice_headers_format(srv->policy, &q->d, fields, sizeof fields);
            if (n < 0 || (size_t)n >= sizeof fields) fields[0] = 0;
        }
    }
    switch (status) {
    case 200: snprintf(body, sizeof body, "ok\n"); break;
    case 429: snprintf(body, sizeof body, "too many requests\n"); break;
    case 503: snprintf(body, sizeof body, "rate limiter unavailable: %s\n", q->msg); break;
    case 431: snprintf(body, sizeof body, "request header fields too large\n"); break;
    case 501: snprintf(body, sizeof body, "transfer-encoding is not supported\n"); break;
    case 505: snprintf(body, sizeof body, "HTTP version not supported\n"); break;
    default: snprintf(body, sizeof body, "bad request\n");
    }
    size_t body_len = strlen(body);
    int n = snprintf(out, 8192,
                     "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n%s%s\r\n%s",
                     status, reason(status), http_date(), body_len, q->close_after ? "Connection: close\r\n" : "",
                     fields, q->head ? "" : body);
    return n < 0 ? 0 : (size_t)n < 8192 ? (size_t)n : 8191;
}

/* ------------------------------------------------------------------------ */
/* Connections                                                               */
/* ------------------------------------------------------------------------ */

static void pump(conn *c);

static void maybe_free(conn *c) {
    if (c->closed && c->pending == 0) free(c);
}

static void on_closed(uv_handle_t *h) {
    conn *c = h->data;
    c->closed = 1;
    maybe_free(c);
}

/* Closes c at once (what is not written is dropped). */
static void close_now(conn *c) {
    c->closing = 1;
    if (c->handle_closing) return;
    c->handle_closing = 1;
    if (c->prev) c->prev->next = c->next;
    else c->srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
    (void)status;
    close_now(req->data);
}

/* Closes c once what it was given to write is written. */
static void close_after_writes(conn *c) {
    if (c->closing) return;
    c->closing = 1;
    if (c->reading) uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
    c->shutdown.data = c;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0) close_now(c);
}

typedef struct {
    uv_write_t req;
    conn *c;
    char data[];
} write_req;

static void on_written(uv_write_t *req, int status) {
    write_req *w = (write_req *)req;
    conn *c = w->c;
    free(w);
    c->writes--;
    if (status < 0) close_now(c); /* the client went away */
    else if (!c->closing) pump(c);
}

/* Sends len bytes: what the socket takes at once, the rest through libuv. */
static void send_bytes(conn *c, const char *buf, size_t len) {
    if (!len || c->closing) return;
    if (c->writes == 0) {
        uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (n >= 0 && (size_t)n == len) return;
        if (n < 0 && n != UV_EAGAIN) {
            close_now(c);
            return;
        }
        if (n > 0) buf += n, len -= (size_t)n;
    }
    write_req *w = malloc(sizeof *w + len);
    if (!w) {
        close_now(c);
        return;
    }
    w->c = c;
    memcpy(w->data, buf, len);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
        free(w);
        close_now(c);
        return;
    }
    c->writes++;
}

/* Writes the answers at the head of the queue that are decided, in one
 * write; closes c after the one that says so, or once a client that sent
 * all it will has had every answer. */
static void flush(conn *c) {
    server *srv = c->srv;
    size_t len = 0;
    int close = 0;
    while (c->q_n && !close && !c->closing) {
        request *q = &c->q[c->q_head];
        if (!q->ready) break;
        if (len + 8192 > srv->out_cap) {
            size_t cap = srv->out_cap ? 2 * srv->out_cap : 65536;
            char *grown = realloc(srv->out, cap);
            if (!grown) break;
            srv->out = grown;
            srv->out_cap = cap;
        }
        len += answer(srv, q, srv->out + len);
        close = q->close_after;
        c->q_head = (c->q_head + 1) % QUEUE_MAX;
        c->q_n--;
    }
    send_bytes(c, srv->out, len);
    if (close || (c->eof && c->q_n == 0)) close_after_writes(c);
}

static void on_decision(void *user, int rc, const sluice_decision *d) {
    request *q = user;
    conn *c = q->c;
    q->rc = rc;
    q->d = *d;
    if (rc < 0) snprintf(q->msg, sizeof q->msg, "%s", sluice_store_errmsg(c->srv->store));
    q->ready = 1;
    c->pending--;
    if (c->closing) {
        maybe_free(c);
        return;
    }
    if (!c->in_pump) pump(c); /* a remote store's answer: write it, read on */
}

static request *enqueue(conn *c) {
    request *q = &c->q[(c->q_head + c->q_n++) % QUEUE_MAX];
    memset(q, 0, sizeof *q);
    q->c = c;
    return q;
}

static void consume(conn *c, size_t n) {
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
}

/* Parses and decides the requests in c's buffer, while its queue has room. */
static void process(conn *c) {
    server *srv = c->srv;
    while (!c->closing && !c->done_parsing && c->q_n < QUEUE_MAX) {
        if (c->body_left) {
            size_t k = c->body_left < (int64_t)c->in_len ? (size_t)c->body_left : c->in_len;
            consume(c, k);
            c->body_left -= (int64_t)k;
            if (c->body_left) break;
        }
        if (c->in_len == 0) break;
        parsed r;
        long n = parse_head(c->in, c->in_len, &r);
        if (n == 0) break; /* not all there yet */
        request *q = enqueue(c);
        if (n < 0) { /* answered, then closed: what follows cannot be found */
            q->status = (int)-n;
            q->ready = 1;
            q->close_after = 1;
            c->done_parsing = 1;
            c->in_len = 0;
            break;
        }
        q->head = r.head;
        q->close_after = !r.keep_alive;
        if (q->close_after) c->done_parsing = 1;
        const char *key = r.key ? r.key : c->addr;
        size_t key_len = r.key ? r.key_len : strlen(c->addr);
        c->pending++;
        int rc = sluice_store_acquire_async(srv->store, srv->policy, key, key_len, 1, on_decision, q);
        if (rc < 0) { /* not taken: no callback will come */
            c->pending--;
            q->rc = rc;
            snprintf(q->msg, sizeof q->msg, "%s", sluice_store_errmsg(srv->store));
            q->ready = 1;
        }
        consume(c, (size_t)n); /* the key was copied, if the store needed it later */
        c->body_left = r.content_length;
    }
}

/* Reads while there is room to take requests in. */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    conn *c = h->data;
    (void)suggested;
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(IN_MAX - c->in_len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
    conn *c = s->data;
    (void)buf;
    if (nread > 0) {
        c->in_len += (size_t)nread;
    } else if (nread == UV_EOF) {
        c->eof = 1;
    } else if (nread < 0) {
        close_now(c); /* reset, or no room (never: reading pauses first) */
        return;
    }
    pump(c);
}

/* Parses what is buffered, writes what is decided, and reads on or pauses. */
static void pump(conn *c) {
    if (c->in_pump || c->closing) return;
    c->in_pump = 1;
    process(c);
    flush(c);
    c->in_pump = 0;
    if (c->closing) return;
    int want = !c->eof && !c->done_parsing && c->q_n < QUEUE_MAX && c->writes < WRITES_MAX && c->in_len < IN_MAX;
    if (want && !c->reading) uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (!want && c->reading) uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = want;
}

static void peer_address(conn *c) {
    struct sockaddr_storage sa;
    int len = sizeof sa;
    strcpy(c->addr, "unknown");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) != 0) return;
    if (sa.ss_family == AF_INET6) uv_ip6_name((struct sockaddr_in6 *)&sa, c->addr, sizeof c->addr);
    else uv_ip4_name((struct sockaddr_in *)&sa, c->addr, sizeof c->addr);
}

static void on_connection(uv_stream_t *listener, int status) {
    server *srv = listener->data;
    if (status < 0 || srv->stopping) return;
    conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->srv = srv;
    uv_tcp_init(srv->loop, &c->tcp);
    c->tcp.data = c;
    c->next = srv->conns;
    if (c->next) c->next->prev = c;
    srv->conns = c;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        close_now(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    peer_address(c);
    pump(c);
}

/* ------------------------------------------------------------------------ */
/* The server                                                                */
/* ------------------------------------------------------------------------ */

static void on_signal(uv_signal_t *sig, int signum) {
    server *srv = sig->data;
    (void)signum;
    if (srv->stopping) return;
    srv->stopping = 1;
    uv_close((uv_handle_t *)&srv->listener, NULL);
    while (srv->conns) close_now(srv->conns);
    sluice_uv_detach(srv->store); /* decisions in flight: cancelled now */
    uv_close((uv_handle_t *)&srv->sigint, NULL);
    uv_close((uv_handle_t *)&srv->sigterm, NULL);
}

static int usage(const char *msg) {
    if (msg) fprintf(stderr, "http_limit_uv: %s\n", msg);
    fprintf(stderr, "usage: http_limit_uv --listen HOST:PORT --policy SPEC [--store URL] [--name NAME]\n"
                    "  answers every HTTP request 200 or 429 under SPEC, per client (the X-Client\n"
                    "  header, else the client's address); --store defaults to memory:, --name to http;\n"
                    "  port 0 picks one: \"listening on HOST:PORT\" says which\n");
    return 2;
}

/* HOST:PORT or [HOST]:PORT into an address. */
static int listen_address(const char *text, struct sockaddr_storage *sa, char *err, size_t errlen) {
    char host[256];
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text || !colon[1]) {
        snprintf(err, errlen, "--listen %s: expected HOST:PORT", text);
        return -1;
    }
    size_t hl = (size_t)(colon - text);
    if (text[0] == '[' && hl >= 2 && text[hl - 1] == ']') text++, hl -= 2;
    if (hl >= sizeof host) hl = sizeof host - 1;
    memcpy(host, text, hl);
    host[hl] = 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "--listen %s: %s", text, gai_strerror(rc));
        return -1;
    }
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

int main(int argc, char **argv) {
    const char *listen_at = NULL, *spec = NULL, *url = "memory:", *name = "http";
    for (int i = 1; i < argc; i++) {
        const char *opts[] = {"--listen", "--policy", "--store", "--name"};
        const char **dest[] = {&listen_at, &spec, &url, &name};
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(NULL);
            return 0;
        }
        int k = 0;
        for (; k < 4; k++) {
            size_t n = strlen(opts[k]);
            if (!strncmp(argv[i], opts[k], n) && argv[i][n] == '=') {
                *dest[k] = argv[i] + n + 1;
                break;
            }
            if (!strcmp(argv[i], opts[k])) {
                if (i + 1 == argc) return usage("an option needs a value");
                *dest[k] = argv[++i];
                break;
            }
        }
        if (k == 4) {
            char msg[300];
            snprintf(msg, sizeof msg, "unknown argument %s", argv[i]);
            return usage(msg);
        }
    }
    if (!listen_at || !spec) return usage("--listen and --policy are required");

    signal(SIGPIPE, SIG_IGN); /* a client gone: a write error, not the end */
    server srv;
    memset(&srv, 0, sizeof srv);
    char err[512];
    struct sockaddr_storage sa;
    if (listen_address(listen_at, &sa, err, sizeof err) != 0) {
        fprintf(stderr, "http_limit_uv: %s\n", err);
        return 2;
    }
    if (sluice_policy_parse(name, spec, &srv.policy, err, sizeof err) != 0) {
        fprintf(stderr, "http_limit_uv: --policy: %s\n", err);
        return 2;
    }
    if (sluice_store_open_err(url, NULL, &srv.store, err, sizeof err) != 0) {
        fprintf(stderr, "http_limit_uv: --store: %s\n", err);
        sluice_policy_free(srv.policy);
        return 2;
    }
    srv.loop = uv_default_loop();
    int rc = sluice_uv_attach(srv.store, srv.loop);
    if (rc != 0) {
        fprintf(stderr, "http_limit_uv: --store %s: %s\n", url, sluice_store_errmsg(srv.store));
        sluice_store_close(srv.store);
        sluice_policy_free(srv.policy);
        return 2;
    }
    uv_tcp_init(srv.loop, &srv.listener);
    srv.listener.data = &srv;
    if ((rc = uv_tcp_bind(&srv.listener, (struct sockaddr *)&sa, 0)) != 0 ||
        (rc = uv_listen((uv_stream_t *)&srv.listener, 511, on_connection)) != 0) {
        fprintf(stderr, "http_limit_uv: --listen %s: %s\n", listen_at, uv_strerror(rc));
        uv_close((uv_handle_t *)&srv.listener, NULL);
        sluice_store_close(srv.store);
        uv_run(srv.loop, UV_RUN_DEFAULT);
        uv_loop_close(srv.loop);
        sluice_policy_free(srv.policy);
        return 1;
    }
    int len = sizeof sa;
    char host[64] = "";
    uv_tcp_getsockname(&srv.listener, (struct sockaddr *)&sa, &len);
    int ipv6 = sa.ss_family == AF_INET6;
    if (ipv6) uv_ip6_name((struct sockaddr_in6 *)&sa, host, sizeof host);
    else uv_ip4_name((struct sockaddr_in *)&sa, host, sizeof host);
    int port = ntohs(ipv6 ? ((struct sockaddr_in6 *)&sa)->sin6_port : ((struct sockaddr_in *)&sa)->sin_port);
    uv_signal_init(srv.loop, &srv.sigint);
    uv_signal_init(srv.loop, &srv.sigterm);
    srv.sigint.data = srv.sigterm.data = &srv;
    uv_signal_start(&srv.sigint, on_signal, SIGINT);
    uv_signal_start(&srv.sigterm, on_signal, SIGTERM);
    printf("listening on %s%s%s:%d\n", ipv6 ? "[" : "", host, ipv6 ? "]" : "", port);
    fflush(stdout);

    uv_run(srv.loop, UV_RUN_DEFAULT);

    sluice_store_close(srv.store);
    sluice_policy_free(srv.policy);
    free(srv.out);
    rc = uv_loop_close(srv.loop);
    fprintf(stderr, "http_limit_uv: stopped%s\n", rc ? " (handles left open)" : "");
    return rc ? 1 : 0;
}
