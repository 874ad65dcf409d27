// The shims that need _GNU_SOURCE; the rest are inline functions in the header.
#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>

int concord_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}
