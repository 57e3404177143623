/* sluice_event.h: a store's non-blocking calls on a libevent loop
 * (libsluice-event: pkg-config sluice-event, CMake sluice::sluice_event;
 * built when libevent is found). It fills the loop interface of sluice.h
 * ("The loop interface") with libevent events: a persistent event for each
 * fd the store watches, one timer event. They are pending while the store
 * has calls in flight, and only then: event_base_dispatch returns, once the
 * program's own events are done, when the store's calls are.
 *
 *   sluice_store *s;   sluice_store_open("redis://...", NULL, &s);
 *   sluice_event_attach(s, base);
 *   sluice_store_acquire_async(s, p, key, len, 1, on_decision, request);
 *   event_base_dispatch(base);
 *
 * Not thread-safe: attach, detach, and the store's non-blocking calls
 * happen on the thread that runs the base. */
#ifndef SLUICE_EVENT_H
#define SLUICE_EVENT_H

#include <sluice.h>

#ifdef __cplusplus
extern "C" {
#endif

struct event_base; /* <event2/event.h> */

/* Attaches base to s (sluice_store_attach_loop). Errors as
 * sluice_store_attach_loop (SLUICE_EINVAL also for a NULL base), and
 * SLUICE_ENOMEM. An fd the base's backend cannot watch (a regular file
 * under epoll) is refused to the store, as the loop interface says. */
SLUICE_EXTERN int sluice_event_attach(sluice_store *s, struct event_base *base);
/* Detaches s's loop (sluice_store_detach_loop; sluice_store_close does it
 * too): calls in flight complete with SLUICE_ECANCELED, and the adapter's
 * events are freed at once. 0; SLUICE_EINVAL for NULL s. */
SLUICE_EXTERN int sluice_event_detach(sluice_store *s);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_EVENT_H */
