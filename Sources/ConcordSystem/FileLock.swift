#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage

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
