import FileWatching
import Logging
import Synchronization

/// The one inotify watcher of a syncing store, shared by what watches the container: live sync
/// (arriving logs) and reset watching (the sentinel's files). It starts with its first user and
/// stops with its last, so a paused or stopped engine keeps no thread.
final class SyncWatcher: Sendable {
    private struct State {
        var watcher: InotifyWatcher?
        var users = 0
    }
    private let state = Mutex(State())
    private let logger: Logger

    init(logger: Logger) { self.logger = logger }

    /// The watcher, started if nobody uses it yet; each call is matched by one ``release()``.
    func acquire() throws -> InotifyWatcher {
        try state.withLock { state in
            if let watcher = state.watcher {
                state.users += 1
                return watcher
            }
            let watcher = try InotifyWatcher(settleWindow: .zero, logger: logger)
            state.watcher = watcher
            state.users = 1
            return watcher
        }
    }

    /// Gives up one use; the last one stops the watcher (outside the lock: stopping joins its
    /// thread, which may be delivering an event to a user waiting for this lock).
    func release() {
        let finished = state.withLock { state -> InotifyWatcher? in
            guard state.users > 0 else { return nil }
            state.users -= 1
            guard state.users == 0 else { return nil }
            defer { state.watcher = nil }
            return state.watcher
        }
        finished?.stop()
    }
}
