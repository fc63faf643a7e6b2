#ifndef SLOT_ERRBUF_H
#define SLOT_ERRBUF_H

#include <stddef.h>

/* Core functions report failures to their caller as text in a buffer
 * (err, errlen), and never log; the daemon decides what to say. This writes
 * one such message; err may be NULL or errlen 0, to discard it. */
void errbuf_set(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
