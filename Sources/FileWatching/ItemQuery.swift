#if canImport(Glibc)
import Glibc
#endif
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
        !name.hasPrefix(InotifyWatcher.barrierPrefix) && !name.hasSuffix(".concord-tmp") && fnmatch(pattern, name, 0) == 0
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
        let state = State(query: self, continuation: continuation)
        do {
            let watch = try watcher.watch(scope, recursive: true, immediate: false, onStop: { continuation.finish() }) { events in
                state.apply(events)
            }
            continuation.onTermination = { _ in watch.cancel() }
            state.gather()
        } catch {
            continuation.finish(throwing: error)
        }
        return stream.makeAsyncIterator()
    }

    /// The set of results one iteration holds, turning watcher events into changes.
    private final class State: Sendable {
        let query: ItemQuery
        let continuation: AsyncThrowingStream<Change, any Error>.Continuation
        private let results = Mutex<(gathered: Bool, paths: Set<String>, early: [FileSystemEvent])>((false, [], []))

        init(query: ItemQuery, continuation: AsyncThrowingStream<Change, any Error>.Continuation) {
            self.query = query
            self.continuation = continuation
        }

        /// The first gathering, after the watch is in place: events that came meanwhile wait
        /// for it and are then applied against it.
        func gather() {
            let found = query.currentResults()
            results.withLock { state in
                state.gathered = true
                state.paths = Set(found.map(\.path))
                continuation.yield(.gathered(found))
                let early = state.early
                state.early.removeAll()
                for event in early { apply(event, to: &state.paths) }
            }
        }

        func apply(_ events: [FileSystemEvent]) {
            results.withLock { state in
                guard state.gathered else {
                    state.early.append(contentsOf: events)
                    return
                }
                for event in events { apply(event, to: &state.paths) }
            }
        }

        private func apply(_ event: FileSystemEvent, to paths: inout Set<String>) {
            func matching(_ url: URL) -> String? {
                let path = url.standardizedFileURL.path
                return query.matches(url.lastPathComponent) ? path : nil
            }
            func add(_ url: URL) {
                guard let path = matching(url), isRegularFile(path) else { return }
                if paths.insert(path).inserted { continuation.yield(.added(URL(fileURLWithPath: path))) }
                else { continuation.yield(.changed(URL(fileURLWithPath: path))) }
            }
            func remove(_ url: URL) {
                let path = url.standardizedFileURL.path
                if paths.remove(path) != nil { continuation.yield(.removed(URL(fileURLWithPath: path))) }
                // A directory that went away takes its files with it.
                for inside in paths.filter({ $0.hasPrefix(path + "/") }).sorted() {
                    paths.remove(inside)
                    continuation.yield(.removed(URL(fileURLWithPath: inside)))
                }
            }
            switch event {
            case .appeared(let url):
                // A directory that arrived whole (moved in) brings its files with it.
                if isDirectory(url.path) { rescan(&paths) } else { add(url) }
            case .changed(let url):
                if let path = matching(url), paths.contains(path) {
                    continuation.yield(.changed(URL(fileURLWithPath: path)))
                } else {
                    add(url)
                }
            case .removed(let url): remove(url)
            case .moved(let from, let to):
                remove(from)
                add(to)
                if isDirectory(to.path) { rescan(&paths) }
            case .rescanned:
                rescan(&paths)
            }
        }

        /// Brings the set in line with the disk and reports the difference.
        private func rescan(_ paths: inout Set<String>) {
            let now = Set(query.currentResults().map(\.path))
            for gone in paths.subtracting(now).sorted() { continuation.yield(.removed(URL(fileURLWithPath: gone))) }
            for new in now.subtracting(paths).sorted() { continuation.yield(.added(URL(fileURLWithPath: new))) }
            paths = now
        }
    }
}

private func isRegularFile(_ path: String) -> Bool { ((try? FileSystem.identity(at: path)) ?? nil)?.kind == .regular }
private func isDirectory(_ path: String) -> Bool { ((try? FileSystem.identity(at: path)) ?? nil)?.kind == .directory }
