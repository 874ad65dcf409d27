// The shims that need _GNU_SOURCE; the rest are inline functions in the header.
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

int concord_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}

int concord_spawn_close_from(void *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np((posix_spawn_file_actions_t *)actions, from);
}
