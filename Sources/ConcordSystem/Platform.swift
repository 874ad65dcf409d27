// Concord runs on Linux only: watching is inotify, the presenters' wake-ups are eventfd, and the
// locks rely on Linux's flock(2) and open-file-description record locks. Every other module
// depends on this one, so a build elsewhere stops here, with this message, instead of at the
// first missing system call. (Package.swift still names macOS 15 so that a Mac can resolve the
// package and open it in an editor; it does not build there.)
#if !os(Linux)
#error(
    "Concord supports Linux only (it is built on inotify, eventfd and Linux's flock and OFD locks). On Apple platforms use Foundation's NSFileCoordinator, NSFilePresenter and Core Data."
)
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Who is running: the calling thread, this process and its user, as the kernel names them.
///
/// None of these calls can fail, so none of them throws.
public enum Platform {
    /// The calling thread's POSIX thread id (`pthread_self(3)`).
    ///
    /// Two threads alive at the same time in this process never share an id; a thread that has
    /// ended may see its id reused by a later one.
    public static var currentThreadID: UInt { UInt(pthread_self()) }

    /// This process's id (`getpid(2)`).
    public static var processID: Int32 { getpid() }

    /// The real user id of this process (`getuid(2)`): the user whose files it may own.
    public static var userID: UInt32 { getuid() }
}
