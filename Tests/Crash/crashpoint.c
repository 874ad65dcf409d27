// crashpoint: an LD_PRELOAD library for `make crash` that kills its process with SIGKILL at an
// aimed point: the Nth call of one file system call on a file whose path ends with a given
// suffix. Concord's code is not changed for it: every durable write goes through these calls.
//
//   CONCORD_CRASH_CALL    rename (and renameat) | link | unlink (and unlinkat) | pwrite (and
//                         pwrite64) | write | fsync | fdatasync | ftruncate | getrandom (no
//                         path: leave CONCORD_CRASH_SUFFIX unset)
//   CONCORD_CRASH_SUFFIX  the path's end: for rename and link the destination's, for the
//                         descriptor calls the file's (read from /proc/self/fd)
//   CONCORD_CRASH_SKIP    how many matching calls to let through first (default 0)
//   CONCORD_CRASH_WHEN    before (default: the call never happens) or after (it returns first)
//   CONCORD_CRASH_MARK    a file to create just before the kill, so the driver can count kills
//   CONCORD_CRASH_FAIL    an errno number: the aimed call fails with it (returns -1) instead of
//                         killing the process (with CONCORD_CRASH_WHEN=after, once it has run)
//   CONCORD_CRASH_EVERY   1: every matching call from the aimed one on is hit, not only that one
//                         (with CONCORD_CRASH_FAIL: a resource that stays broken, such as a
//                         kernel that gives no randomness)
//
// Without CONCORD_CRASH_CALL every call goes straight to the C library.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <unistd.h>

static const char *crash_call;
static const char *crash_suffix = "";
static long crash_skip;
static int crash_after;
static const char *crash_mark;
static int crash_fail;
static int crash_every;
static int crash_ready;

__attribute__((constructor)) static void crash_setup(void) {
    crash_call = getenv("CONCORD_CRASH_CALL");
    const char *suffix = getenv("CONCORD_CRASH_SUFFIX");
    if (suffix) crash_suffix = suffix;
    const char *skip = getenv("CONCORD_CRASH_SKIP");
    crash_skip = skip ? atol(skip) : 0;
    const char *when = getenv("CONCORD_CRASH_WHEN");
    crash_after = when && strcmp(when, "after") == 0;
    crash_mark = getenv("CONCORD_CRASH_MARK");
    const char *fail = getenv("CONCORD_CRASH_FAIL");
    crash_fail = fail ? atoi(fail) : 0;
    const char *every = getenv("CONCORD_CRASH_EVERY");
    crash_every = every && strcmp(every, "1") == 0;
    crash_ready = 1;
}

static int ends_with(const char *path, const char *suffix) {
    if (!path) return 0;
    size_t length = strlen(path), suffix_length = strlen(suffix);
    return length >= suffix_length && strcmp(path + length - suffix_length, suffix) == 0;
}

/// Whether this call is the one to crash at (counts matching calls).
static int aimed(const char *call, const char *path) {
    if (!crash_ready || !crash_call || strcmp(call, crash_call) != 0 || !ends_with(path, crash_suffix)) return 0;
    long seen = __atomic_fetch_add(&crash_skip, -1, __ATOMIC_SEQ_CST);
    return seen == 0 || (crash_every && seen < 0);
}

static void crash_now(void) {
    if (crash_mark) {
        int fd = open(crash_mark, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) close(fd);
    }
    kill(getpid(), SIGKILL);
    _exit(137);
}

static int fd_path(int fd, char *buffer, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t count = readlink(link, buffer, size - 1);
    if (count < 0) return 0;
    buffer[count] = 0;
    return 1;
}

#define NEXT(name) static __typeof__(name) *next_##name; if (!next_##name) next_##name = dlsym(RTLD_NEXT, #name)

int rename(const char *source, const char *destination) {
    NEXT(rename);
    int hit = aimed("rename", destination);
    if (hit && crash_fail) {
        if (crash_after) next_rename(source, destination);
        errno = crash_fail;
        return -1;
    }
    if (hit && !crash_after) crash_now();
    int result = next_rename(source, destination);
    if (hit) crash_now();
    return result;
}

int link(const char *source, const char *destination) {
    NEXT(link);
    int hit = aimed("link", destination);
    if (hit && crash_fail) {
        if (crash_after) next_link(source, destination);
        errno = crash_fail;
        return -1;
    }
    if (hit && !crash_after) crash_now();
    int result = next_link(source, destination);
    if (hit) crash_now();
    return result;
}

int unlink(const char *path) {
    NEXT(unlink);
    int hit = aimed("unlink", path);
    if (hit && crash_fail) {
        if (crash_after) next_unlink(path);
        errno = crash_fail;
        return -1;
    }
    if (hit && !crash_after) crash_now();
    int result = next_unlink(path);
    if (hit) crash_now();
    return result;
}

// `family` is the name CONCORD_CRASH_CALL uses (pwrite64 counts as pwrite).
int unlinkat(int directory, const char *path, int flags) {
    NEXT(unlinkat);
    int hit = aimed("unlink", path);
    if (hit && crash_fail) {
        if (crash_after) next_unlinkat(directory, path, flags);
        errno = crash_fail;
        return -1;
    }
    if (hit && !crash_after) crash_now();
    int result = next_unlinkat(directory, path, flags);
    if (hit) crash_now();
    return result;
}

int renameat(int source_directory, const char *source, int destination_directory, const char *destination) {
    NEXT(renameat);
    int hit = aimed("rename", destination);
    if (hit && crash_fail) {
        if (crash_after) next_renameat(source_directory, source, destination_directory, destination);
        errno = crash_fail;
        return -1;
    }
    if (hit && !crash_after) crash_now();
    int result = next_renameat(source_directory, source, destination_directory, destination);
    if (hit) crash_now();
    return result;
}

#define FD_CALL(name, family, ret, params, args)                           \
    ret name params {                                                     \
        NEXT(name);                                                       \
        int hit = 0;                                                      \
        if (crash_ready && crash_call && strcmp(crash_call, family) == 0) { \
            char path[PATH_MAX];                                          \
            hit = fd_path(fd, path, sizeof path) && aimed(family, path);  \
        }                                                                 \
        if (hit && crash_fail) {                                          \
            if (crash_after) next_##name args;                            \
            errno = crash_fail;                                           \
            return -1;                                                    \
        }                                                                 \
        if (hit && !crash_after) crash_now();                             \
        ret result = next_##name args;                                    \
        if (hit) crash_now();                                             \
        return result;                                                    \
    }

FD_CALL(pwrite, "pwrite", ssize_t, (int fd, const void *buffer, size_t count, off_t offset), (fd, buffer, count, offset))
FD_CALL(pwrite64, "pwrite", ssize_t, (int fd, const void *buffer, size_t count, off64_t offset), (fd, buffer, count, offset))
FD_CALL(write, "write", ssize_t, (int fd, const void *buffer, size_t count), (fd, buffer, count))
FD_CALL(fsync, "fsync", int, (int fd), (fd))
FD_CALL(fdatasync, "fdatasync", int, (int fd), (fd))
FD_CALL(ftruncate, "ftruncate", int, (int fd, off_t length), (fd, length))
FD_CALL(ftruncate64, "ftruncate", int, (int fd, off64_t length), (fd, length))

// The kernel's random source (no path: it matches CONCORD_CRASH_SUFFIX "").
ssize_t getrandom(void *buffer, size_t length, unsigned int flags) {
    NEXT(getrandom);
    int hit = aimed("getrandom", "");
    if (hit && crash_fail) {
        if (crash_after) next_getrandom(buffer, length, flags);
        errno = crash_fail;
        return -1;
    }
    if (hit && !crash_after) crash_now();
    ssize_t result = next_getrandom(buffer, length, flags);
    if (hit) crash_now();
    return result;
}
