import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The two modes of an advisory `flock(2)` lock.
public enum FileLockMode: Sendable, Hashable, Comparable {
    /// Many holders at once; excludes exclusive holders.
    case shared
    /// One holder; excludes every other holder.
    case exclusive

    /// Shared is weaker than exclusive.
    public static func < (lhs: FileLockMode, rhs: FileLockMode) -> Bool {
        lhs == .shared && rhs == .exclusive
    }
}

/// `flock(2)` on one open file description, wrapped once.
///
/// A lock belongs to the open file description, not to the process or the thread: two
/// descriptors from two `open` calls conflict even in one process, and the kernel releases the
/// lock when the last descriptor of the description is closed, including when the process dies.
public enum FileLock {
    /// Opens (creating if needed) a lock file for locking, close-on-exec.
    public static func openLockFile(at path: String) throws(SystemCallError) -> Int32 {
        try retryingInterrupts("open", path: path) {
            open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        }
    }

    /// Takes the lock in `mode`, waiting as long as it takes.
    public static func lock(_ fd: Int32, _ mode: FileLockMode, path: String? = nil) throws(SystemCallError) {
        let operation = mode == .shared ? LOCK_SH : LOCK_EX
        try retryingInterrupts("flock", path: path) { flock(fd, operation) }
    }

    /// Takes the lock in `mode` if no one else holds a conflicting lock.
    ///
    /// - Returns: `false` when the lock is held elsewhere (`EWOULDBLOCK`); `true` when taken.
    public static func tryLock(_ fd: Int32, _ mode: FileLockMode, path: String? = nil) throws(SystemCallError) -> Bool {
        let operation = (mode == .shared ? LOCK_SH : LOCK_EX) | LOCK_NB
        while true {
            if flock(fd, operation) == 0 { return true }
            let code = errno
            if code == EINTR { continue }
            if code == EWOULDBLOCK || code == EAGAIN { return false }
            throw SystemCallError(systemCall: "flock", errno: Errno(rawValue: code), path: path)
        }
    }

    /// Releases the lock held on `fd`. Never blocks.
    public static func unlock(_ fd: Int32, path: String? = nil) throws(SystemCallError) {
        try retryingInterrupts("flock", path: path) { flock(fd, LOCK_UN) }
    }

    /// Closes a descriptor, releasing any lock held through it if it was the last one.
    public static func close(_ fd: Int32) {
        // close(2) must not be retried on EINTR on Linux: the descriptor is gone either way.
        _ = Glibc.close(fd)
    }
}

/// Open-file-description record locks (`fcntl(2)` `F_OFD_*`), wrapped once.
///
/// Like `flock` locks they belong to an open file description, conflict between descriptions
/// even in one process, and vanish with the description's last descriptor; unlike `flock`, a
/// lock can be *tested* without being taken, in one call. Concord uses them for the gates that
/// keep writers from starving. They never interact with `flock` locks on the same file.
public enum RecordLock {
    // Linux's values, the same on every architecture; Glibc hides them behind _GNU_SOURCE.
    private static let getLock: Int32 = 36
    private static let setLock: Int32 = 37
    private static let setLockWaiting: Int32 = 38

    private static func request(_ type: Int32) -> Glibc.flock {
        var request = Glibc.flock()
        request.l_type = Int16(type)
        request.l_whence = Int16(SEEK_SET)
        request.l_start = 0
        request.l_len = 0
        request.l_pid = 0
        return request
    }

    /// Whether another open file description holds a lock on the file that conflicts with `mode`.
    public static func isHeldElsewhere(
        _ fd: Int32,
        conflictingWith mode: FileLockMode,
        path: String? = nil
    ) throws(SystemCallError) -> Bool {
        var query = request(mode == .shared ? F_RDLCK : F_WRLCK)
        try retryingInterrupts("fcntl(F_OFD_GETLK)", path: path) { fcntl(fd, getLock, &query) }
        return Int32(query.l_type) != F_UNLCK
    }

    /// Takes the lock if no conflicting one is held; `false` if one is.
    public static func tryLock(_ fd: Int32, _ mode: FileLockMode, path: String? = nil) throws(SystemCallError) -> Bool {
        var lock = request(mode == .shared ? F_RDLCK : F_WRLCK)
        while fcntl(fd, setLock, &lock) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EACCES { return false }
            throw SystemCallError(systemCall: "fcntl(F_OFD_SETLK)", errno: Errno(rawValue: code), path: path)
        }
        return true
    }

    /// Takes the lock, waiting as long as it takes.
    public static func lock(_ fd: Int32, _ mode: FileLockMode, path: String? = nil) throws(SystemCallError) {
        var lock = request(mode == .shared ? F_RDLCK : F_WRLCK)
        try retryingInterrupts("fcntl(F_OFD_SETLKW)", path: path) { fcntl(fd, setLockWaiting, &lock) }
    }

    /// Releases the lock held through `fd`. Never blocks.
    public static func unlock(_ fd: Int32, path: String? = nil) throws(SystemCallError) {
        var lock = request(F_UNLCK)
        try retryingInterrupts("fcntl(F_OFD_SETLK)", path: path) { fcntl(fd, setLock, &lock) }
    }
}
