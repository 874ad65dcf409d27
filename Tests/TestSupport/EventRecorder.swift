import ConcordSystem
import FileWatching
import Foundation

/// Collects a watcher's events and lets a test wait for them.
public final class EventRecorder: @unchecked Sendable {
    private let condition = ConditionLock()
    private var log: [FileSystemEvent] = []

    public init() {}

    /// The handler to pass to ``InotifyWatcher/watch(_:recursive:handler:)``.
    public var handler: @Sendable ([FileSystemEvent]) -> Void {
        { [self] events in
            condition.withLock {
                log.append(contentsOf: events)
                condition.broadcast()
            }
        }
    }

    /// Everything so far.
    public var events: [FileSystemEvent] { condition.withLock { log } }

    /// Forgets what was recorded.
    public func reset() { condition.withLock { log.removeAll() } }

    /// Waits until `predicate` holds for the events so far, within `timeout`.
    @discardableResult
    public func wait(timeout: Duration = .seconds(10), until predicate: ([FileSystemEvent]) -> Bool) -> Bool {
        let deadline = Deadline.after(timeout)
        return condition.withLock {
            while !predicate(log) {
                if !condition.wait(until: deadline) && !predicate(log) { return false }
            }
            return true
        }
    }
}

/// Serializes the one test that lowers the machine's inotify watch limit against every test
/// that adds watches (they share; it excludes).
public enum WatchLimitLock {
    nonisolated(unsafe) private static let lock: UnsafeMutablePointer<pthread_rwlock_t> = {
        let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
        pthread_rwlock_init(lock, nil)
        return lock
    }()

    /// Runs `body` while no test lowers the limit.
    public static func shared<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }

    /// Takes the lock shared until ``endShared()``.
    public static func beginShared() { pthread_rwlock_rdlock(lock) }
    /// Releases a ``beginShared()``.
    public static func endShared() { pthread_rwlock_unlock(lock) }

    /// Runs `body` while no other test adds watches.
    public static func exclusive<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }
}

extension FileSystemEvent {
    /// The event as one line with paths relative to `base`, e.g. `"moved a.txt -> sub/b.txt"`.
    public func relative(to base: URL) -> String {
        let prefix = base.standardizedFileURL.path
        func name(_ url: URL) -> String {
            let path = url.standardizedFileURL.path
            if path == prefix { return "." }
            return path.hasPrefix(prefix + "/") ? String(path.dropFirst(prefix.count + 1)) : path
        }
        switch self {
        case .appeared(let url): return "appeared \(name(url))"
        case .changed(let url): return "changed \(name(url))"
        case .removed(let url): return "removed \(name(url))"
        case .moved(let from, let to): return "moved \(name(from)) -> \(name(to))"
        case .rescanned(let url): return "rescanned \(name(url))"
        }
    }
}

extension EventRecorder {
    /// The events so far, each relative to `base`.
    public func lines(relativeTo base: URL) -> [String] { events.map { $0.relative(to: base) } }
}
