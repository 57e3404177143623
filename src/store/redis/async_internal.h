/* store/redis/async_internal.h: what the two files of the non-blocking
 * side share: a call in flight (acall), a node's non-blocking connection
 * (aconn) with the replies it still expects, and the store's list of its
 * calls in the order made (redis_async).
 *
 *   async.c  the calls: made, followed through redirections, timed out,
 *            called back in order; the store's loop entries
 *   conn.c   the connections: connect, SELECT, SCRIPT LOAD, writes and
 *            reads on the loop's readiness, a broken one failing its calls */
#ifndef SLUICE_REDIS_ASYNC_INTERNAL_H
#define SLUICE_REDIS_ASYNC_INTERNAL_H

#include "redis_internal.h"

/* Where a call stands. */
enum {
    A_NEW,     /* made, not handed to a connection yet */
    A_WAITING, /* on its connection's waiting list: connecting, or SELECT to come back */
    A_SENT,    /* its reply is expected on connection conn */
    A_PAUSED,  /* TRYAGAIN: sent again at retry_at_ms */
    A_DONE,    /* how says how; called back when every earlier call has been */
};
/* How a call ended. */
enum {
    DONE_ANSWERED, /* d: the script's decision */
    DONE_FAILED,   /* why: the server could not decide (on_error says what then) */
    DONE_ERROR,    /* rc: the blocking call's error, why its message */
    DONE_CANCELED, /* rc SLUICE_ECANCELED: the loop was detached */
};

typedef struct acall acall;
struct acall {
    acall *prev, *next; /* the store's calls, in the order made */
    acall *wnext;       /* its connection's waiting list */
    call k;             /* decide.c's: the script's arguments */
    char key[SLUICE_KEY_MAX]; /* k's key: the caller's may change once the call returns */
    sluice_store_cb cb;
    void *user;
    int state, how, rc;
    int conn;            /* A_WAITING, A_SENT: the node index of its connection */
    int ask;             /* >= 0: ASK redirection to this node (ASKING first) */
    int attempts, rounds;
    int64_t started_ms, deadline_ms, retry_at_ms, pause_ms; /* real time */
    sluice_decision d;
    char why[256];
};

/* A reply a connection expects, in the order sent. */
enum { EXP_CALL, EXP_LOAD, EXP_SELECT, EXP_ASKING };
typedef struct {
    int kind;
    acall *a; /* EXP_CALL */
} expect;

/* Where a connection stands. */
enum { C_NONE, C_CONNECTING, C_SELECTING, C_READY };

typedef struct {
    redisContext *c; /* non-blocking; NULL: none */
    int state;
    int events;      /* what its fd is watched for */
    unsigned gen;    /* grows each time c is dropped */
    int failed;      /* the last connect or command failed (reconnects counts the next success) */
    int64_t connect_deadline_ms, down_until_ms;
    expect *q;       /* ring of the replies to come: q_len from q_at */
    size_t q_at, q_len, q_cap;
    int loads;       /* SCRIPT LOADs among them */
    char load_why[160]; /* the last SCRIPT LOAD's error ("" when it worked) */
    acall *wait_head, *wait_tail;
} aconn;

struct redis_async {
    aconn *conns[NODES_MAX]; /* by node index, made when first needed */
    acall *head, *tail;      /* every call not called back yet */
    size_t n_live;
    int64_t armed_ms;        /* the timer's, real time; -1: disarmed */
    int delivering;
};

/* ---- "async.c" ---- */
void sluice__redis_arm_by(redis_store *r, int64_t at_ms);
void sluice__redis_call_done(redis_store *r, acall *a, int how, int rc);
void sluice__redis_call_fail(redis_store *r, acall *a, const char *why);
/* The reply to call a, read on the connection to node from. */
void sluice__redis_call_reply(redis_store *r, int from, acall *a, redisReply *reply);

/* ---- "conn.c" ---- */
/* Sends a on the connection to node i (made when needed), or puts it on
 * the connection's waiting list; a fails there when the node is down. */
void sluice__redis_conn_submit(redis_store *r, int i, acall *a);
/* a got NOSCRIPT on node i's connection: the script loaded there (once for
 * all the calls that got it), then a again. */
void sluice__redis_conn_resend_noscript(redis_store *r, int i, acall *a);
void sluice__redis_conn_ready(redis_store *r, int fd, int events);
/* Connections past their connect deadline dropped; the earliest one left. */
void sluice__redis_conn_expire(redis_store *r, int64_t now_ms);
int64_t sluice__redis_conn_next_deadline(redis_store *r);
/* Node i's connection answered nothing for timeout_ms: dropped, down. */
void sluice__redis_conn_timed_out(redis_store *r, int i);
/* a, waiting, leaves its connection's waiting list. */
void sluice__redis_conn_forget(redis_store *r, acall *a);
/* Node i's connection closed, its fd unwatched first; its calls
 * forgotten (not called back: the caller cancels them). */
void sluice__redis_conn_close(redis_store *r, int i);
void sluice__redis_conns_free(redis_store *r);

#endif
