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
///   it over the target) is reported as one ``FileSystemEvent/changed(_:)`` of the target, and
///   Concord's own (``temporarySuffix``) are, however long the write takes.
/// - ``barrier(for:timeout:)`` waits until every change made before it has been delivered.
///
/// Handlers run one at a time, in order, on a queue of the watcher's own.
public final class InotifyWatcher: @unchecked Sendable {
    /// Files whose names start with this are the watcher's barrier cookies; never reported.
    public static let barrierPrefix = ".concord-barrier-"
    /// Files whose names end with this are Concord's atomic writes in progress (a temporary file
    /// about to be renamed over its target): never reported themselves; the rename is reported
    /// as the target's change (or appearance).
    public static let temporarySuffix = ".concord-tmp"

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

    struct Spec {
        var root: String
        var recursive: Bool
        var immediate: Bool
        var handler: @Sendable ([FileSystemEvent]) -> Void
        var onStop: (@Sendable () -> Void)?
    }

    final class Directory {
        var path: String
        /// The directory's inode, to tell whether `path` still names it.
        var inode: UInt64 = 0
        /// Whether every entry is of interest (so listed, and tracked in `known`).
        var listed: Bool
        var known: Set<String> = []
        /// Files written since their writer last closed them: the close of a file whose writes
        /// were each reported (as every write is) changes nothing more, even when the watcher read
        /// the writes and the close in separate settle windows.
        var writtenUnclosed: Set<String> = []
        /// When the directory's watch began (seconds since 1970): a file closed after writes the
        /// watcher never heard (made before then, by a writer whose descriptor a child process
        /// inherited and closed later, say) changed nothing since, unless it was modified since.
        let watchedSince = Date().timeIntervalSince1970
        /// Watched only to hear that it moved (an ancestor of a watched item), not what is inside.
        var ancestorOnly = false
        /// Where the directory is now, after a rename nobody watched (see ``DirectoryAnchor``).
        var anchor: DirectoryAnchor?
        init(path: String, listed: Bool) {
            self.path = path
            self.listed = listed
        }
    }

    let settleWindow: Duration
    let logger: Logger
    let pairingWindow: Duration = .milliseconds(50)
    let inotifyFD: Int32
    private let wakeFD: Int32
    let delivery = DispatchQueue(label: "concord.watcher.delivery")

    // Shared with callers, behind `lock`.
    private let lock = ConditionLock()
    private var commands: [() -> Void] = []
    private var running = true
    var specs: [Int: Spec] = [:]
    private var nextID = 0
    private var barrierCounter = 0

    // Owned by the watcher thread.
    var directories: [Int32: Directory] = [:]
    var descriptorByPath: [String: Int32] = [:]
    var pendingMoves: [UInt32: (path: String, isDirectory: Bool, at: Deadline)] = [:]
    var batch = Coalescer()
    var batchDeadline: Deadline?
    var barriers: [String: @Sendable () -> Void] = [:]
    var watchFailure: WatchError?
    var overflows = 0

    static let interest: Inotify.Mask = [
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
        settleWindow: Duration = .milliseconds(10),
        logger: Logger = Logger(label: "concord.watching")
    ) throws(WatchError) {
        self.settleWindow = settleWindow
        self.logger = logger
        batch.enabled = settleWindow > .zero
        do {
            inotifyFD = try Inotify.open()
        } catch {
            throw WatchError(
                code: error.errno == .tooManyOpenFiles ? .instanceLimitReached : .systemCallFailed,
                path: nil,
                message: error.errno == .tooManyOpenFiles
                    ? "too many inotify instances; raise /proc/sys/fs/inotify/max_user_instances"
                    : "cannot create an inotify instance",
                underlyingError: error
            )
        }
        do {
            wakeFD = try Inotify.openWakeup()
        } catch {
            Inotify.close(inotifyFD)
            throw WatchError(
                code: .systemCallFailed,
                path: nil,
                message: "cannot create an eventfd",
                underlyingError: error
            )
        }
        logger.debug(
            "inotify watcher started",
            metadata: [
                "concord.settle_ms":
                    "\(settleWindow.components.seconds * 1000 + settleWindow.components.attoseconds / 1_000_000_000_000_000)"
            ]
        )
        let thread = Thread { [self] in run() }
        thread.name = "concord.inotify"
        thread.start()
    }

    /// Stops the thread and closes the descriptors; pending events are dropped.
    public func stop() {
        lock.withLock { running = false }
        try? wakeThread()  // if the thread cannot be woken, it ends at its next event
    }

    deinit {
        // The thread holds `self` strongly while it runs, so this runs after it ended.
        Inotify.close(inotifyFD)
        Inotify.close(wakeFD)
    }

    // MARK: - Public API

    /// Watches the item at `url`: a file, or a directory (and, when `recursive`, everything inside
    /// it, including what appears later). The item itself may not exist yet: its appearance is
    /// reported. Its parent directory must exist.
    ///
    /// - Parameters:
    ///   - url: the item to watch.
    ///   - recursive: for a directory, whether to watch everything inside it too.
    ///   - handler: gets batches of events, in order, on the watcher's delivery queue.
    /// - Returns: the registration, once the watches are in place (events from then on are seen).
    public func watch(
        _ url: URL,
        recursive: Bool = true,
        handler: @escaping @Sendable ([FileSystemEvent]) -> Void
    ) throws(WatchError) -> Watch {
        try watch(url, recursive: recursive, immediate: false, onStop: nil, handler: handler)
    }

    /// `immediate` handlers run on the watcher thread itself, one hop sooner: for handlers that
    /// only hand the events on (as the presenter bridge does), never for ones that block.
    package func watch(
        _ url: URL,
        recursive: Bool,
        immediate: Bool,
        onStop: (@Sendable () -> Void)?,
        handler: @escaping @Sendable ([FileSystemEvent]) -> Void
    ) throws(WatchError) -> Watch {
        let root = url.standardizedFileURL.path
        let id: Int = lock.withLock {
            nextID += 1
            return nextID
        }
        let failure = try perform(at: root) { [self] () -> WatchError? in
            watchFailure = nil
            // What happened before this watch is not news to it: deliver it to the watches that
            // were there (a batch still gathering would otherwise hand it the appearance of an
            // item that was there before it began).
            if !batch.isEmpty && pendingMoves.isEmpty { flush() }
            specs[id] = Spec(root: root, recursive: recursive, immediate: immediate, handler: handler, onStop: onStop)
            install(root: root, recursive: recursive)
            defer { watchFailure = nil }
            if watchFailure != nil { specs[id] = nil }
            return watchFailure
        }
        if let failure { throw failure }
        return Watch(id: id, watcher: self)
    }

    /// An `AsyncSequence` of the events under `url`; ending the iteration ends the watch.
    public func events(_ url: URL, recursive: Bool = true) throws(WatchError) -> AsyncStream<FileSystemEvent> {
        let (stream, continuation) = AsyncStream<FileSystemEvent>.makeStream()
        let registration = try watch(url, recursive: recursive, immediate: false, onStop: { continuation.finish() }) {
            events in
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
        let directoryPath: String? = try perform(at: path) { [self] () -> String? in
            if descriptorByPath[path] != nil { return path }
            let parent = (path as NSString).deletingLastPathComponent
            return descriptorByPath[parent] != nil ? parent : nil
        }
        guard let directoryPath else {
            throw WatchError(code: .stopped, path: path, message: "nothing is watched there")
        }
        let name = lock.withLock { () -> String in
            barrierCounter += 1
            return "\(Self.barrierPrefix)\(Platform.processID)-\(barrierCounter)"
        }
        let done = Semaphore()
        try perform(at: path) { [self] in barriers[name] = { done.signal() } }
        let cookie = directoryPath + "/" + name
        defer { try? FileSystem.removeFile(at: cookie) }
        do {
            try FileSystem.createFile(at: cookie, mode: 0o600)
        } catch {
            _ = try? perform(at: path) { [self] in barriers[name] = nil }
            throw WatchError(
                code: .systemCallFailed,
                path: cookie,
                message: "cannot create the barrier cookie",
                underlyingError: error
            )
        }
        if !done.wait(timeout: timeout) {
            _ = try? perform(at: path) { [self] in barriers[name] = nil }
            throw WatchError(
                code: .timedOut,
                path: path,
                message: "the barrier's event did not arrive within \(timeout)"
            )
        }
    }

    /// Blocks the watcher thread until `release` is signalled, so a test can make the kernel's
    /// queue overflow, or deliver a burst of changes in one batch.
    package func suspendForTesting(until release: @escaping @Sendable () -> Void) {
        _ = try? perform(at: "") { release() }
    }

    // MARK: - Commands

    /// How long a caller waits for the watcher thread to run its command (a command adds the
    /// watches of a whole tree, which can take long on a large one, but never forever).
    static let commandTimeout: Duration = .seconds(120)

    /// A wakeup failure to simulate (tests): `wakeThread()` throws it instead of writing.
    private var wakeFailureForTesting: SystemCallError?

    /// Makes the next `wakeThread()` fail with `error` (`nil`: wake normally again).
    func failWakeupsForTesting(with error: SystemCallError?) {
        lock.withLock { wakeFailureForTesting = error }
    }

    /// Wakes the watcher thread out of its `poll`.
    private func wakeThread() throws(SystemCallError) {
        if let failure = lock.withLock({ wakeFailureForTesting }) { throw failure }
        try Inotify.wake(wakeFD)
    }

    /// Runs `body` on the watcher thread and returns its result, waiting at most
    /// ``commandTimeout``.
    ///
    /// - Throws: ``WatchError`` naming `path`: ``WatchError/Code/stopped`` if the watcher stopped,
    ///   ``WatchError/Code/systemCallFailed`` if its thread cannot be woken (the watcher then
    ///   stops: nothing could reach the thread again), ``WatchError/Code/timedOut`` past the bound.
    @discardableResult
    private func perform<T>(at path: String, _ body: @escaping () -> T) throws(WatchError) -> T {
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
        guard accepted else { throw WatchError(code: .stopped, path: path, message: "the watcher was stopped") }
        do {
            try wakeThread()
        } catch {
            lock.withLock { running = false }
            logger.error(
                "cannot wake the inotify watcher thread; the watcher stops",
                metadata: ["concord.error": "\(error)"]
            )
            throw WatchError(
                code: .systemCallFailed,
                path: path,
                message: "cannot wake the watcher thread (its eventfd); the watcher stopped",
                underlyingError: error
            )
        }
        guard done.wait(timeout: Self.commandTimeout) else {
            throw WatchError(
                code: .timedOut,
                path: path,
                message: "the watcher thread did not run the request within \(Self.commandTimeout)"
            )
        }
        return result!
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
        if accepted {
            do {
                try wakeThread()
            } catch {
                // The thread runs the removal when it next wakes for an event.
                logger.warning(
                    "cannot wake the inotify watcher thread to remove a watch",
                    metadata: ["concord.error": "\(error)"]
                )
            }
        }
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
            let deadlines = [
                batchDeadline,
                pendingMoves.values.map(\.at).min().map {
                    Deadline(nanoseconds: $0.nanoseconds + nanoseconds(pairingWindow))
                },
            ].compactMap { $0 }
            if let next = deadlines.min() {
                let now = Deadline.now.nanoseconds
                timeout = next.nanoseconds <= now ? 0 : Int32(min((next.nanoseconds - now) / 1_000_000 + 1, 1_000))
            }
            let readable =
                (try? Inotify.waitReadable([inotifyFD, wakeFD], timeoutMilliseconds: timeout)) ?? [false, false]
            if readable[1] { try? Inotify.drainWakeups(wakeFD) }
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

    func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
    }

    // MARK: Delivering

    func flush() {
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

}
