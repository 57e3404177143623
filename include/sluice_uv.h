/* sluice_uv.h: a store's non-blocking calls on a libuv loop (libsluice-uv:
 * pkg-config sluice-uv, CMake sluice::sluice_uv; built when libuv is
 * found). It fills the loop interface of sluice.h ("The loop interface")
 * with libuv handles: a uv_poll_t for each fd the store watches, one
 * uv_timer_t for its timer. They keep the loop alive while the store has
 * calls in flight, and only then: a loop whose other handles are closed
 * returns from uv_run once the store's calls are done.
 *
 *   sluice_store *s;   sluice_store_open("redis://...", NULL, &s);
 *   sluice_uv_attach(s, uv_default_loop());
 *   sluice_store_acquire_async(s, p, key, len, 1, on_decision, request);
 *   uv_run(uv_default_loop(), UV_RUN_DEFAULT);
 *
 * Like libuv itself, not thread-safe: attach, detach, and the store's
 * non-blocking calls happen on the loop's thread. */
#ifndef SLUICE_UV_H
#define SLUICE_UV_H

#include <sluice.h>
#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Attaches loop to s (sluice_store_attach_loop). Errors as
 * sluice_store_attach_loop (SLUICE_EINVAL also for a NULL loop), and
 * SLUICE_ENOMEM. An fd libuv cannot poll (a regular file), or one another
 * handle of the loop polls already, is refused to the store, as the loop
 * interface says. */
SLUICE_EXTERN int sluice_uv_attach(sluice_store *s, uv_loop_t *loop);
/* Detaches s's loop (sluice_store_detach_loop; sluice_store_close does it
 * too): calls in flight complete with SLUICE_ECANCELED, and the adapter's
 * handles are closed, which libuv finishes on the loop's next turn: run the
 * loop (uv_run) once more before uv_loop_close(). 0; SLUICE_EINVAL for NULL
 * s. */
SLUICE_EXTERN int sluice_uv_detach(sluice_store *s);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_UV_H */
