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
