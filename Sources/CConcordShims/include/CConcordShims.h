// The few Linux declarations that Swift's Glibc module map does not export.
#ifndef CCONCORD_SHIMS_H
#define CCONCORD_SHIMS_H
#include <sys/eventfd.h>

static inline int concord_eventfd_nonblocking(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}
#endif
