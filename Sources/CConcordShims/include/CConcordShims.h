// The few Linux declarations that Swift's Glibc module map does not export.
#ifndef CCONCORD_SHIMS_H
#define CCONCORD_SHIMS_H
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/types.h>

/// pipe2(fds, O_CLOEXEC): both ends close-on-exec from the start, so no child spawned meanwhile
/// by another thread inherits them.
int concord_pipe_cloexec(int fds[2]);

/// posix_spawn_file_actions_addclosefrom_np(actions, from): the child closes every descriptor
/// from `from` up (`actions` is a posix_spawn_file_actions_t *).
int concord_spawn_close_from(void *actions, int from);

static inline int concord_eventfd_nonblocking(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}
/// getrandom(buffer, length, 0) through the C library's wrapper (so LD_PRELOAD fault injection
/// reaches it): bytes from the kernel's random source, or -1 with errno.
static inline ssize_t concord_getrandom(void *buffer, size_t length) {
    return getrandom(buffer, length, 0);
}
#endif
