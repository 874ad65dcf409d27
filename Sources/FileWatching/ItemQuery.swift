import ConcordSystem
import Foundation
import Synchronization

/// A live set of the files under a directory whose names match a pattern: the counterpart of
/// `NSMetadataQuery` for a local scope.
///
/// Iterating the query gathers the matching files first (``Change/gathered(_:)``), then reports
/// each file that is added, changed or removed, for as long as the iteration goes on; ending the
/// loop ends the watch.
///
/// ```swift
/// let logs = ItemQuery(scope: containerURL, matching: "*.log", watcher: watcher)
/// for try await change in logs {
///     switch change {
///     case .gathered(let files): importAll(files)
///     case .added(let file), .changed(let file): importLog(file)
///     case .removed(let file): forget(file)
///     }
/// }
/// ```
public struct ItemQuery: AsyncSequence, Sendable {
    /// One step of the query's results.
    public enum Change: Sendable, Hashable {
        /// The initial results, sorted by path (also sent again, complete, after a rescan).
        case gathered([URL])
        /// A matching file appeared (created, moved in, or renamed to a matching name).
        case added(URL)
        /// A matching file's content changed (including an atomic replace).
        case changed(URL)
        /// A matching file went away (deleted, moved out, or renamed to a name that does not match).
        case removed(URL)
    }

    /// The directory searched, with everything inside it.
    public let scope: URL
    /// A shell pattern (`fnmatch(3)`) that a file's name must match, such as `"*.log"`.
    public let pattern: String
    private let watcher: InotifyWatcher

    /// A query for the files under `scope` whose names match `pattern`, watched by `watcher`.
    public init(scope: URL, matching pattern: String, watcher: InotifyWatcher) {
        self.scope = scope.standardizedFileURL
        self.pattern = pattern
        self.watcher = watcher
    }

    /// Whether a file name matches the pattern.
    public func matches(_ name: String) -> Bool {
        !name.hasPrefix(InotifyWatcher.barrierPrefix) && !name.hasSuffix(".concord-tmp")
            && FileSystem.nameMatches(name, pattern: pattern)
    }

    /// The matching files under the scope now, sorted by path.
    public func currentResults() -> [URL] {
        var found: [String] = []
        let root = scope.path
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
        while let relative = enumerator.nextObject() as? String {
            let path = root + "/" + relative
            if matches((relative as NSString).lastPathComponent), isRegularFile(path) { found.append(path) }
        }
        return found.sorted().map { URL(fileURLWithPath: $0) }
    }

    /// Starts a watch of the scope and gathers the results; the watch ends with the iteration.
    public func makeAsyncIterator() -> AsyncThrowingStream<Change, any Error>.Iterator {
        let (stream, continuation) = AsyncThrowingStream<Change, any Error>.makeStream()
        do {
            let observation = try observe(onEnd: { continuation.finish() }) { continuation.yield($0) }
            continuation.onTermination = { _ in observation.cancel() }
        } catch {
            continuation.finish(throwing: error)
        }
        return stream.makeAsyncIterator()
    }

    /// A running query started with ``observe(onEnd:_:)``; ``cancel()`` ends it.
    public struct Observation: Sendable {
        let watch: InotifyWatcher.Watch
        fileprivate let state: State

        /// Ends the query: no changes are delivered after it returns, except one already being delivered.
        public func cancel() {
            state.cancel()
            watch.cancel()
        }
    }

    /// The callback form of the query, for code that does not iterate on Swift concurrency's
    /// threads: `handler` gets ``Change/gathered(_:)`` first, then every change, in order, on the
    /// watcher's queue, until ``Observation/cancel()`` or the end of the watch (the scope went
    /// away, or the watcher stopped), which calls `onEnd`.
    ///
    /// - Throws: `WatchError` if the scope cannot be watched.
    public func observe(
        onEnd: (@Sendable () -> Void)? = nil,
        _ handler: @escaping @Sendable (Change) -> Void
    ) throws -> Observation {
        let state = State(query: self, deliver: handler)
        let watch = try watcher.watch(scope, recursive: true, immediate: false, onStop: { onEnd?() }) { events in
            state.apply(events)
        }
        state.gather()
        return Observation(watch: watch, state: state)
    }

    /// The set of results one observation holds, turning watcher events into changes.
    ///
    /// Changes are worked out under the lock and handed to `deliver` after it is released, in
    /// order and one at a time: whichever thread finds no delivery running drains the queue.
    fileprivate final class State: Sendable {
        struct Results {
            var cancelled = false
            var gathered = false
            var paths: Set<String> = []
            var early: [FileSystemEvent] = []
            var outbox: [Change] = []
            var delivering = false
        }

        let query: ItemQuery
        let deliver: @Sendable (Change) -> Void
        private let results = Mutex(Results())

        init(query: ItemQuery, deliver: @escaping @Sendable (Change) -> Void) {
            self.query = query
            self.deliver = deliver
        }

        /// The first gathering, after the watch is in place: events that came meanwhile wait
        /// for it and are then applied against it.
        func gather() {
            let found = query.currentResults()
            let batch = results.withLock { state -> [Change]? in
                state.gathered = true
                state.paths = Set(found.map(\.path))
                var changes: [Change] = [.gathered(found)]
                for event in state.early { apply(event, to: &state.paths, into: &changes) }
                state.early.removeAll()
                return Self.enqueue(changes, in: &state)
            }
            drain(batch)
        }

        func apply(_ events: [FileSystemEvent]) {
            let batch = results.withLock { state -> [Change]? in
                guard state.gathered else {
                    state.early.append(contentsOf: events)
                    return nil
                }
                var changes: [Change] = []
                for event in events { apply(event, to: &state.paths, into: &changes) }
                return Self.enqueue(changes, in: &state)
            }
            drain(batch)
        }

        /// Queues `changes`; returns what to deliver now if no delivery is running.
        private static func enqueue(_ changes: [Change], in state: inout Results) -> [Change]? {
            guard !state.cancelled else { return nil }
            state.outbox += changes
            guard !state.delivering, !state.outbox.isEmpty else { return nil }
            state.delivering = true
            defer { state.outbox.removeAll() }
            return state.outbox
        }

        /// Stops deliveries, also of changes already queued.
        func cancel() {
            results.withLock { state in
                state.cancelled = true
                state.outbox.removeAll()
            }
        }

        /// Delivers `batch` and whatever was queued meanwhile, unlocked.
        private func drain(_ batch: [Change]?) {
            guard var batch else { return }
            while true {
                for change in batch {
                    guard !results.withLock({ $0.cancelled }) else { break }
                    deliver(change)
                }
                let next = results.withLock { state -> [Change]? in
                    guard !state.outbox.isEmpty else {
                        state.delivering = false
                        return nil
                    }
                    defer { state.outbox.removeAll() }
                    return state.outbox
                }
                guard let next else { return }
                batch = next
            }
        }

        private func apply(_ event: FileSystemEvent, to paths: inout Set<String>, into changes: inout [Change]) {
            func deliver(_ change: Change) { changes.append(change) }
            func matching(_ url: URL) -> String? {
                let path = url.standardizedFileURL.path
                return query.matches(url.lastPathComponent) ? path : nil
            }
            func add(_ url: URL) {
                guard let path = matching(url), isRegularFile(path) else { return }
                if paths.insert(path).inserted {
                    deliver(.added(URL(fileURLWithPath: path)))
                } else {
                    deliver(.changed(URL(fileURLWithPath: path)))
                }
            }
            func remove(_ url: URL) {
                let path = url.standardizedFileURL.path
                if paths.remove(path) != nil { deliver(.removed(URL(fileURLWithPath: path))) }
                // A directory that went away takes its files with it.
                for inside in paths.filter({ $0.hasPrefix(path + "/") }).sorted() {
                    paths.remove(inside)
                    deliver(.removed(URL(fileURLWithPath: inside)))
                }
            }
            switch event {
            case .appeared(let url):
                // A directory that arrived whole (moved in) brings its files with it.
                if isDirectory(url.path) { rescan(&paths, into: &changes) } else { add(url) }
            case .changed(let url):
                if let path = matching(url), paths.contains(path) {
                    deliver(.changed(URL(fileURLWithPath: path)))
                } else {
                    add(url)
                }
            case .removed(let url): remove(url)
            case .moved(let from, let to):
                remove(from)
                add(to)
                if isDirectory(to.path) { rescan(&paths, into: &changes) }
            case .rescanned:
                rescan(&paths, into: &changes)
            }
        }

        /// Brings the set in line with the disk and reports the difference.
        private func rescan(_ paths: inout Set<String>, into changes: inout [Change]) {
            let now = Set(query.currentResults().map(\.path))
            for gone in paths.subtracting(now).sorted() { changes.append(.removed(URL(fileURLWithPath: gone))) }
            for new in now.subtracting(paths).sorted() { changes.append(.added(URL(fileURLWithPath: new))) }
            paths = now
        }
    }
}

private func isRegularFile(_ path: String) -> Bool { ((try? FileSystem.identity(at: path)) ?? nil)?.kind == .regular }
private func isDirectory(_ path: String) -> Bool { ((try? FileSystem.identity(at: path)) ?? nil)?.kind == .directory }
