#if canImport(Glibc)
import Glibc
#endif
import ConcordSystem
import Dispatch
import Foundation
import Logging
import Synchronization

/// Watches files and directory trees through the kernel's inotify and reports what changed, who
/// ever changed it: this process, another one, or a file-sync engine.
///
/// - One thread owns the inotify descriptor and makes every watch change; an `eventfd` wakes it.
/// - A new directory is watched before it is listed, and what was already in it is reported as
///   appeared, once.
/// - Moves are paired by cookie: a move inside what is watched is one ``FileSystemEvent/moved(from:to:)``;
///   out of it, a removal; into it, an appearance. Paths stay right after directories move, at any
///   depth.
/// - A kernel queue overflow becomes a rescan and a ``FileSystemEvent/rescanned(_:)`` event.
/// - Events are coalesced within a settle window; an atomic save (write a temporary file, rename
///   it over the target) is reported as one ``FileSystemEvent/changed(_:)`` of the target.
/// - ``barrier(for:timeout:)`` waits until every change made before it has been delivered.
///
/// Handlers run one at a time, in order, on a queue of the watcher's own.
public final class InotifyWatcher: @unchecked Sendable {
    /// Files whose names start with this are the watcher's barrier cookies; never reported.
    public static let barrierPrefix = ".concord-barrier-"

    /// A registration; cancel it (or let it go) to stop hearing about its item.
    public final class Watch: Sendable {
        let id: Int
        weak let watcher: InotifyWatcher?
        init(id: Int, watcher: InotifyWatcher) {
            self.id = id
            self.watcher = watcher
        }
        /// Stops delivering events for this watch.
        public func cancel() { watcher?.remove(id) }
        deinit { watcher?.remove(id) }
    }

    private struct Spec {
        var root: String
        var recursive: Bool
        var immediate: Bool
        var handler: @Sendable ([FileSystemEvent]) -> Void
        var onStop: (@Sendable () -> Void)?
    }

    private final class Directory {
        var path: String
        /// The directory's inode, to tell whether `path` still names it.
        var inode: UInt64 = 0
        /// Whether every entry is of interest (so listed, and tracked in `known`).
        var listed: Bool
        var known: Set<String> = []
        /// Watched only to hear that it moved (an ancestor of a watched item), not what is inside.
        var ancestorOnly = false
        /// Where the directory is now, after a rename nobody watched (see ``DirectoryAnchor``).
        var anchor: DirectoryAnchor?
        init(path: String, listed: Bool) {
            self.path = path
            self.listed = listed
        }
    }

    private let settleWindow: Duration
    private let logger: Logger
    private let pairingWindow: Duration = .milliseconds(50)
    private let inotifyFD: Int32
    private let wakeFD: Int32
    private let delivery = DispatchQueue(label: "concord.watcher.delivery")

    // Shared with callers, behind `lock`.
    private let lock = ConditionLock()
    private var commands: [() -> Void] = []
    private var running = true
    private var specs: [Int: Spec] = [:]
    private var nextID = 0
    private var barrierCounter = 0

    // Owned by the watcher thread.
    private var directories: [Int32: Directory] = [:]
    private var descriptorByPath: [String: Int32] = [:]
    private var pendingMoves: [UInt32: (path: String, isDirectory: Bool, at: Deadline)] = [:]
    private var batch = Coalescer()
    private var batchDeadline: Deadline?
    private var barriers: [String: @Sendable () -> Void] = [:]
    private var watchFailure: WatchError?
    private var overflows = 0

    private static let interest: Inotify.Mask = [
        .modify, .attributes, .closeWrite, .movedFrom, .movedTo, .create, .delete, .deleteSelf, .moveSelf,
        .onlyDirectory, .dontFollow, .excludeUnlinked,
    ]
    /// What an ancestor of a watched item is watched for: only its own renames. Added to any
    /// mask the directory already has, never replacing it.
    static let ancestorInterest: Inotify.Mask = [.moveSelf, .onlyDirectory, .dontFollow, .addToMask]

    /// Starts a watcher and its thread.
    ///
    /// - Parameter settleWindow: how long to gather events before delivering them coalesced; zero
    ///   turns coalescing off and delivers every change as soon as it is read.
    /// - Parameter logger: where the watcher says what it does: lifecycle at `debug`, each event
    ///   batch at `trace`, a queue overflow or a watch it could not add at `warning`.
    public init(
        settleWindow: Duration = .milliseconds(10), logger: Logger = Logger(label: "concord.watching")
    ) throws(WatchError) {
        self.settleWindow = settleWindow
        self.logger = logger
        batch.enabled = settleWindow > .zero
        do {
            inotifyFD = try Inotify.open()
        } catch {
            throw WatchError(
                code: error.errno == .tooManyOpenFiles ? .instanceLimitReached : .systemCallFailed, path: nil,
                message: error.errno == .tooManyOpenFiles
                    ? "too many inotify instances; raise /proc/sys/fs/inotify/max_user_instances"
                    : "cannot create an inotify instance", underlyingError: error)
        }
        do {
            wakeFD = try Inotify.openWakeup()
        } catch {
            close(inotifyFD)
            throw WatchError(code: .systemCallFailed, path: nil, message: "cannot create an eventfd", underlyingError: error)
        }
        logger.debug("inotify watcher started", metadata: ["concord.settle_ms": "\(settleWindow.components.seconds * 1000 + settleWindow.components.attoseconds / 1_000_000_000_000_000)"])
        let thread = Thread { [self] in run() }
        thread.name = "concord.inotify"
        thread.start()
    }

    /// Stops the thread and closes the descriptors; pending events are dropped.
    public func stop() {
        lock.withLock { running = false }
        Inotify.wake(wakeFD)
    }

    deinit {
        // The thread holds `self` strongly while it runs, so this runs after it ended.
        close(inotifyFD)
        close(wakeFD)
    }

    // MARK: - Public API

    /// Watches the item at `url`: a file, or a directory (and, when `recursive`, everything inside
    /// it, including what appears later). The item itself may not exist yet: its appearance is
    /// reported. Its parent directory must exist.
    ///
    /// - Parameter handler: gets batches of events, in order, on the watcher's delivery queue.
    /// - Returns: the registration, once the watches are in place (events from then on are seen).
    public func watch(
        _ url: URL, recursive: Bool = true, handler: @escaping @Sendable ([FileSystemEvent]) -> Void
    ) throws(WatchError) -> Watch {
        try watch(url, recursive: recursive, immediate: false, onStop: nil, handler: handler)
    }

    /// `immediate` handlers run on the watcher thread itself, one hop sooner: for handlers that
    /// only hand the events on (as the presenter bridge does), never for ones that block.
    package func watch(
        _ url: URL, recursive: Bool, immediate: Bool, onStop: (@Sendable () -> Void)?, handler: @escaping @Sendable ([FileSystemEvent]) -> Void
    ) throws(WatchError) -> Watch {
        let root = url.standardizedFileURL.path
        let id: Int = lock.withLock {
            nextID += 1
            return nextID
        }
        let failure = perform { [self] () -> WatchError? in
            watchFailure = nil
            specs[id] = Spec(root: root, recursive: recursive, immediate: immediate, handler: handler, onStop: onStop)
            install(root: root, recursive: recursive)
            defer { watchFailure = nil }
            if watchFailure != nil { specs[id] = nil }
            return watchFailure
        }
        switch failure {
        case .none: throw WatchError(code: .stopped, path: root, message: "the watcher was stopped")
        case .some(.some(let error)): throw error
        case .some(.none): return Watch(id: id, watcher: self)
        }
    }

    /// An `AsyncSequence` of the events under `url`; ending the iteration ends the watch.
    public func events(_ url: URL, recursive: Bool = true) throws(WatchError) -> AsyncStream<FileSystemEvent> {
        let (stream, continuation) = AsyncStream<FileSystemEvent>.makeStream()
        let registration = try watch(url, recursive: recursive, immediate: false, onStop: { continuation.finish() }) { events in
            for event in events { continuation.yield(event) }
        }
        continuation.onTermination = { _ in registration.cancel() }
        return stream
    }

    /// Waits until every change made under `url` before this call has been delivered to the
    /// handlers: a cookie file is created in the watched directory and the wait ends when its
    /// event comes through (and the handlers have run for everything before it).
    public func barrier(for url: URL, timeout: Duration = .seconds(10)) throws(WatchError) {
        let path = url.standardizedFileURL.path
        let directoryPath: String? = perform { [self] () -> String? in
            if descriptorByPath[path] != nil { return path }
            let parent = (path as NSString).deletingLastPathComponent
            return descriptorByPath[parent] != nil ? parent : nil
        } ?? nil
        guard let directoryPath else {
            throw WatchError(code: .stopped, path: path, message: "nothing is watched there")
        }
        let name = lock.withLock { () -> String in
            barrierCounter += 1
            return "\(Self.barrierPrefix)\(getpid())-\(barrierCounter)"
        }
        let done = Semaphore()
        _ = perform { [self] in barriers[name] = { done.signal() } }
        let cookie = directoryPath + "/" + name
        let fd = open(cookie, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd) }
        defer { unlink(cookie) }
        guard fd >= 0 else {
            _ = perform { [self] in barriers[name] = nil }
            throw WatchError(
                code: .systemCallFailed, path: cookie, message: "cannot create the barrier cookie",
                underlyingError: SystemCallError(systemCall: "open", errno: lastErrno, path: cookie))
        }
        if !done.wait(timeout: timeout) {
            _ = perform { [self] in barriers[name] = nil }
            throw WatchError(code: .timedOut, path: path, message: "the barrier's event did not arrive within \(timeout)")
        }
    }

    /// Blocks the watcher thread until `release` is signalled, so a test can make the kernel's
    /// queue overflow, or deliver a burst of changes in one batch.
    package func suspendForTesting(until release: @escaping @Sendable () -> Void) {
        _ = perform { release() }
    }

    // MARK: - Commands

    /// Runs `body` on the watcher thread and returns its result; `nil` if the watcher stopped.
    private func perform<T>(_ body: @escaping () -> T) -> T? {
        let done = Semaphore()
        nonisolated(unsafe) var result: T?
        let accepted = lock.withLock { () -> Bool in
            guard running else { return false }
            commands.append {
                result = body()
                done.signal()
            }
            return true
        }
        guard accepted else { return nil }
        Inotify.wake(wakeFD)
        done.wait(timeout: nil)
        return result
    }

    private func remove(_ id: Int) {
        let accepted = lock.withLock { () -> Bool in
            guard running else { return false }
            commands.append { [self] in
                specs[id] = nil
                pruneWatches()
            }
            return true
        }
        if accepted { Inotify.wake(wakeFD) }
    }

    // MARK: - The watcher thread

    private func run() {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 8)
        defer { buffer.deallocate() }
        while true {
            let (stillRunning, work) = lock.withLock { () -> (Bool, [() -> Void]) in
                let work = commands
                commands.removeAll()
                return (running, work)
            }
            for command in work { command() }
            if !stillRunning {
                // Sequences built on this watcher end with it.
                for spec in specs.values { if let onStop = spec.onStop { delivery.async(execute: onStop) } }
                return
            }

            var timeout: Int32 = -1
            let deadlines = [batchDeadline, pendingMoves.values.map(\.at).min().map { Deadline(nanoseconds: $0.nanoseconds + nanoseconds(pairingWindow)) }].compactMap { $0 }
            if let next = deadlines.min() {
                let now = Deadline.now.nanoseconds
                timeout = next.nanoseconds <= now ? 0 : Int32(min((next.nanoseconds - now) / 1_000_000 + 1, 1_000))
            }
            let readable = (try? Inotify.waitReadable([inotifyFD, wakeFD], timeoutMilliseconds: timeout)) ?? [false, false]
            if readable[1] { Inotify.drainWakeups(wakeFD) }
            if readable[0], let events = try? Inotify.readEvents(inotifyFD, into: buffer), !events.isEmpty {
                process(events)
                if batchDeadline == nil && !batch.isEmpty {
                    batchDeadline = Deadline.after(settleWindow)
                }
            }
            expireMoves()
            if let deadline = batchDeadline, deadline.hasPassed { flush() }
        }
    }

    private func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
    }

    // MARK: Installing watches

    /// Watches what `root` needs: its parent (to see the root itself come, go and move), the root
    /// if it is a directory, and everything inside it when recursive.
    ///
    /// Every ancestor above the parent is watched for its own renames, and the nearest directory
    /// (the root if it is one, else its parent) gets an anchor, so a rename of any folder above
    /// the root is followed (see ``followMovedDirectory(_:)``).
    private func install(root: String, recursive: Bool) {
        let parent = (root as NSString).deletingLastPathComponent
        let name = (root as NSString).lastPathComponent
        if let node = addDirectory(parent, listed: false), !node.listed {
            if exists(root) { node.known.insert(name) }
        }
        let rootIsDirectory = isDirectory(root)
        if rootIsDirectory { addTree(root, recursive: recursive, report: false) }
        if let descriptor = descriptorByPath[rootIsDirectory ? root : parent], let node = directories[descriptor],
            node.anchor == nil
        {
            node.anchor = (try? DirectoryAnchor(path: node.path)) ?? nil
        }
        addAncestors(of: parent)
    }

    /// Watches every directory above `directory`, up to `/`, for its own renames.
    private func addAncestors(of directory: String) {
        var path = directory
        while path.count > 1 {
            path = (path as NSString).deletingLastPathComponent
            if let descriptor = descriptorByPath[path], directories[descriptor] != nil { continue }
            guard let descriptor = (try? Inotify.addWatch(inotifyFD, path: path, mask: Self.ancestorInterest)) ?? nil else {
                continue
            }
            // Already watched under another name (a link): the mask was only added to.
            if directories[descriptor] != nil { continue }
            let node = Directory(path: path, listed: false)
            node.ancestorOnly = true
            node.inode = ((try? FileSystem.identity(at: path)) ?? nil)?.inode ?? 0
            directories[descriptor] = node
            descriptorByPath[path] = descriptor
        }
    }

    /// Adds a watch on the directory at `path` (before listing it). Returns the node, or `nil`
    /// if it does not exist or the watch failed (recorded in `watchFailure`).
    @discardableResult
    private func addDirectory(_ path: String, listed: Bool) -> Directory? {
        do {
            // Always ask the kernel (it returns the same descriptor for the same directory): the
            // directory now at `path` may not be the one watched under that name before (replaced
            // by a move, or deleted and recreated while the queue overflowed).
            guard let descriptor = try Inotify.addWatch(inotifyFD, path: path, mask: Self.interest) else { return nil }
            if let stale = descriptorByPath[path], stale != descriptor, let old = directories[stale], old.path == path {
                directories[stale] = nil
                Inotify.removeWatch(inotifyFD, stale)
            }
            if let node = directories[descriptor] {
                // Watched for its renames only until now: the full mask replaced that one.
                node.ancestorOnly = false
                if node.path != path {
                    // The same directory under another name (it moved); follow the new name.
                    if descriptorByPath[node.path] == descriptor { descriptorByPath[node.path] = nil }
                    node.path = path
                }
                descriptorByPath[path] = descriptor
                if listed { node.listed = true }
                return node
            }
            let node = Directory(path: path, listed: listed)
            node.inode = ((try? FileSystem.identity(at: path)) ?? nil)?.inode ?? 0
            directories[descriptor] = node
            descriptorByPath[path] = descriptor
            return node
        } catch {
            if error.errno == .noSpace {
                let limit = (try? String(contentsOfFile: Inotify.watchLimitPath, encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
                watchFailure = WatchError(
                    code: .watchLimitReached, path: path,
                    message: "the inotify watch limit (\(limit), \(Inotify.watchLimitPath)) is reached; raise it, for "
                        + "example with `sysctl fs.inotify.max_user_watches=524288`", underlyingError: error)
            } else if error.errno != .permissionDenied {
                watchFailure = WatchError(code: .systemCallFailed, path: path, message: "cannot watch the directory", underlyingError: error)
            }
            if let watchFailure { logger.warning("\(watchFailure)") }
            return nil
        }
    }

    /// Watches and lists a directory (and, when recursive, its subdirectories), reporting what
    /// it finds as appeared when `report` is set. Watching comes before listing, so nothing
    /// created in between is missed; `known` keeps anything from being reported twice.
    private func addTree(_ path: String, recursive: Bool, report: Bool) {
        guard let node = addDirectory(path, listed: true) else { return }
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: path) else { return }
        for name in entries where !name.hasPrefix(Self.barrierPrefix) {
            let child = path + "/" + name
            if node.known.insert(name).inserted, report { batch.add(.appeared(child)) }
            if recursive && isDirectory(child) { addTree(child, recursive: true, report: report) }
        }
    }

    /// Removes watches that no spec needs any more.
    private func pruneWatches() {
        let roots = specs.values
        for (descriptor, node) in directories {
            let needed = roots.contains { spec in
                node.path == spec.root || isInside(spec.root, node.path)
                    || (spec.recursive && isInside(node.path, spec.root))
            }
            if !needed {
                Inotify.removeWatch(inotifyFD, descriptor)
                directories[descriptor] = nil
                descriptorByPath[node.path] = nil
            }
        }
    }

    private func isWatchedRecursively(_ path: String) -> Bool {
        specs.values.contains { $0.recursive && (path == $0.root || isInside(path, $0.root)) }
    }

    private func isWatchedDirectly(_ path: String) -> Bool {
        specs.values.contains { path == $0.root || ($0.recursive && isInside(path, $0.root)) }
    }

    // MARK: Processing events

    private func process(_ events: [Inotify.Event]) {
        for event in events {
            if event.mask.contains(.queueOverflow) {
                rescan()
                continue
            }
            guard let node = directories[event.watch] else { continue }
            if event.mask.contains(.ignored) {
                directories[event.watch] = nil
                if descriptorByPath[node.path] == event.watch { descriptorByPath[node.path] = nil }
                continue
            }
            if event.name.isEmpty {
                // Self events. The parent's watch reports them with a path, unless the parent is
                // not watched: a directory that moved with no one to say where leaves its path
                // stale, so it (and what was watched through it) is gone from where it was.
                if event.mask.contains(.moveSelf), ((try? FileSystem.identity(at: node.path)) ?? nil)?.inode != node.inode {
                    if !followMovedDirectory(node) {
                        let old = node.path
                        forgetDirectories(under: old, evenIfParentOfRoot: true)
                        batch.add(.removed(old))
                    }
                    if batchDeadline == nil { batchDeadline = Deadline.after(settleWindow) }
                }
                continue
            }
            let path = node.path + "/" + event.name
            // The halves of a rename usually come back to back, but other events may come between
            // them. A pending move is settled early only by an event about the same name (it
            // cannot still be on its way) or by a barrier (written after the rename returned, so
            // its other half, if any, is already queued); otherwise the pairing window decides.
            if !pendingMoves.isEmpty && !(event.mask.contains(.movedTo) && pendingMoves[event.cookie] != nil) {
                if event.name.hasPrefix(Self.barrierPrefix) {
                    expireMoves(all: true)
                } else if pendingMoves.values.contains(where: { $0.path == path || isInside(path, $0.path) }) {
                    expireMoves(all: true)
                }
            }
            if event.name.hasPrefix(Self.barrierPrefix) {
                if event.mask.contains(.create), let signal = barriers.removeValue(forKey: event.name) {
                    flush()
                    delivery.async { signal() }
                }
                continue
            }
            let isDirectory = event.mask.contains(.isDirectory)
            if event.mask.contains(.create) {
                if node.known.insert(event.name).inserted { batch.add(.appeared(path)) }
                if isDirectory { directoryAppeared(path) }
            } else if event.mask.contains(.movedFrom) {
                node.known.remove(event.name)
                pendingMoves[event.cookie] = (path, isDirectory, Deadline.now)
                batch.add(.pending(cookie: event.cookie, from: path))
            } else if event.mask.contains(.movedTo) {
                let replaced = !node.known.insert(event.name).inserted
                if let from = pendingMoves.removeValue(forKey: event.cookie) {
                    if from.isDirectory { renameDirectories(from: from.path, to: path) }
                    batch.resolve(cookie: event.cookie, with: .moved(from: from.path, to: path, replaced: replaced))
                    if isDirectory { directoryAppeared(path) }
                } else {
                    batch.add(replaced ? .changed(path) : .appeared(path))
                    if isDirectory { directoryAppeared(path) }
                }
            } else if event.mask.contains(.delete) {
                node.known.remove(event.name)
                batch.add(.removed(path))
            } else if !event.mask.isDisjoint(with: [.modify, .attributes, .closeWrite]) {
                if !isDirectory { batch.add(.changed(path)) }
            }
        }
    }

    /// A directory came into being at `path` (created or moved in): watch and list it if a spec
    /// covers it, reporting what is already inside.
    private func directoryAppeared(_ path: String) {
        if let spec = specs.values.first(where: { $0.root == path }) {
            addTree(path, recursive: spec.recursive, report: true)
        } else if isWatchedRecursively((path as NSString).deletingLastPathComponent) {
            addTree(path, recursive: true, report: true)
        }
    }

    /// A move whose other half did not come within the pairing window left what is watched.
    private func expireMoves(all: Bool = false) {
        guard !pendingMoves.isEmpty else { return }
        let limit = all ? 0 : nanoseconds(pairingWindow)
        let now = Deadline.now.nanoseconds
        for (cookie, move) in pendingMoves where now >= move.at.nanoseconds + limit {
            pendingMoves[cookie] = nil
            if move.isDirectory { forgetDirectories(under: move.path) }
            batch.resolve(cookie: cookie, with: .removed(move.path))
            if batchDeadline == nil { batchDeadline = Deadline.after(settleWindow) }
        }
    }

    /// A watched directory was renamed and no watched parent reported where to: ask an anchor at
    /// or under it where it is now, report the move, and follow it. `false` if no anchor knows.
    private func followMovedDirectory(_ node: Directory) -> Bool {
        let old = node.path
        var destination: String?
        for candidate in directories.values where candidate.anchor != nil && (candidate.path == old || isInside(candidate.path, old)) {
            guard let current = candidate.anchor?.currentPath else { continue }
            // The anchor's path below the moved directory is unchanged by the move.
            let suffix = Array(candidate.path.utf8.dropFirst(old.utf8.count))
            let bytes = Array(current.utf8)
            guard bytes.count > suffix.count, bytes.suffix(suffix.count).elementsEqual(suffix) else { continue }
            let moved = String(decoding: bytes.dropLast(suffix.count), as: UTF8.self)
            if ((try? FileSystem.identity(at: moved)) ?? nil)?.inode == node.inode {
                destination = moved
                break
            }
        }
        guard let destination else { return false }
        if let (cookie, _) = pendingMoves.first(where: { $0.value.path == old }) {
            // Its parent saw it leave, for a place no watch covers.
            pendingMoves[cookie] = nil
            batch.resolve(cookie: cookie, with: .moved(from: old, to: destination, replaced: false))
        } else {
            batch.add(.moved(from: old, to: destination, replaced: false))
        }
        for (descriptor, moved) in directories where moved.path == old || isInside(moved.path, old) {
            let newPath = destination + String(decoding: moved.path.utf8.dropFirst(old.utf8.count), as: UTF8.self)
            if descriptorByPath[moved.path] == descriptor { descriptorByPath[moved.path] = nil }
            moved.path = newPath
            descriptorByPath[newPath] = descriptor
        }
        return true
    }

    /// Follows a directory that moved: every watched directory at or under `from` now lives
    /// under `to` (the kernel keeps the watches; only the names change).
    private func renameDirectories(from: String, to: String) {
        for (descriptor, node) in directories where node.path == from || isInside(node.path, from) {
            let newPath = to + String(decoding: node.path.utf8.dropFirst(from.utf8.count), as: UTF8.self)
            if descriptorByPath[node.path] == descriptor { descriptorByPath[node.path] = nil }
            node.path = newPath
            descriptorByPath[newPath] = descriptor
        }
        // Moved out of every recursive scope: stop watching inside it, unless it carried a watched
        // item along (its watcher hears of the move and may follow it there).
        let carriedRoot = specs.values.contains { $0.root == from || isInside($0.root, from) }
        if !isWatchedDirectly(to) && !carriedRoot { forgetDirectories(under: to) }
    }

    private func forgetDirectories(under path: String, evenIfParentOfRoot: Bool = false) {
        for (descriptor, node) in directories where node.path == path || isInside(node.path, path) {
            let stillNeeded = specs.values.contains { node.path == ($0.root as NSString).deletingLastPathComponent }
            if stillNeeded && !evenIfParentOfRoot { continue }
            Inotify.removeWatch(inotifyFD, descriptor)
            directories[descriptor] = nil
            if descriptorByPath[node.path] == descriptor { descriptorByPath[node.path] = nil }
        }
    }

    /// After a queue overflow: relist everything, watch what is new, and tell every spec.
    private func rescan() {
        overflows += 1
        // A warning once; later overflows of the same watcher at debug.
        logger.log(
            level: overflows == 1 ? .warning : .debug,
            "the kernel's inotify queue overflowed: events were lost; rescanning what is watched",
            metadata: ["concord.overflows": "\(overflows)", "concord.queue_limit": "/proc/sys/fs/inotify/max_queued_events"])
        pendingMoves.removeAll()
        for node in directories.values where node.listed { node.known.removeAll() }
        for spec in specs.values { install(root: spec.root, recursive: spec.recursive) }
        for node in Array(directories.values) where node.listed {
            if let entries = try? FileManager.default.contentsOfDirectory(atPath: node.path) {
                node.known = Set(entries.filter { !$0.hasPrefix(Self.barrierPrefix) })
            }
        }
        for spec in specs.values { batch.add(.rescanned(spec.root)) }
        if batchDeadline == nil { batchDeadline = Deadline.now }
    }

    // MARK: Delivering

    private func flush() {
        if let oldest = pendingMoves.values.map(\.at).min() {
            // Half a rename is still open: deliver once it is settled, in order.
            batchDeadline = Deadline(nanoseconds: oldest.nanoseconds + nanoseconds(pairingWindow))
            return
        }
        batchDeadline = nil
        let events = batch.drain()
        guard !events.isEmpty else { return }
        logger.trace("delivering changes", metadata: ["concord.count": "\(events.count)"])
        let specs = lock.withLock { self.specs }
        for spec in specs.values.sorted(by: { $0.root < $1.root }) {
            let mine = events.compactMap { $0.routed(to: spec.root, recursive: spec.recursive) }
            if mine.isEmpty { continue }
            let handler = spec.handler
            if spec.immediate { handler(mine) } else { delivery.async { handler(mine) } }
        }
    }

    private func exists(_ path: String) -> Bool { ((try? FileSystem.identity(at: path)) ?? nil) != nil }
    private func isDirectory(_ path: String) -> Bool { ((try? FileSystem.identity(at: path)) ?? nil)?.kind == .directory }
}

func isInside(_ path: String, _ directory: String) -> Bool {
    let inner = path.utf8
    let outer = directory.utf8
    guard inner.count > outer.count, inner.starts(with: outer) else { return false }
    return directory == "/" || inner[inner.index(inner.startIndex, offsetBy: outer.count)] == UInt8(ascii: "/")
}

/// A counting semaphore with an optional timeout.
final class Semaphore: @unchecked Sendable {
    private let condition = ConditionLock()
    private var count = 0
    func signal() {
        condition.withLock {
            count += 1
            condition.broadcast()
        }
    }
    @discardableResult
    func wait(timeout: Duration?) -> Bool {
        let deadline = Deadline.after(timeout)
        return condition.withLock {
            while count == 0 {
                if !condition.wait(until: deadline) && count == 0 { return false }
            }
            count -= 1
            return true
        }
    }
}
