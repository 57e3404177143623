/* trace_verbs.h: the verbs a trace step may take (trace.h draws them),
 * beside a request: a peek, a refund, a reset. */
#ifndef SLUICE_TEST_TRACE_VERBS_H
#define SLUICE_TEST_TRACE_VERBS_H

enum { TRACE_ACQUIRE, TRACE_PEEK, TRACE_REFUND, TRACE_RESET };

#endif /* SLUICE_TEST_TRACE_VERBS_H */
