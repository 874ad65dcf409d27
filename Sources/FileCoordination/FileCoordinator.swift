import ConcordSystem
import Foundation
import Logging
import Synchronization

/// Coordinates the reading and writing of files and directories among threads, processes and
/// file presenters: the Linux counterpart of Foundation's `NSFileCoordinator`.
///
/// Wrap every access to a shared file in a coordination:
///
/// ```swift
/// let coordinator = FileCoordinator()
/// try coordinator.coordinate(writingItemAt: settingsURL) { url in
///     try data.write(to: url)
/// }
/// ```
///
/// Readers share an item; a writer excludes readers and other writers, in this process and in
/// every other process on the machine that coordinates through Concord (through `flock(2)` on lock
/// files in ``LockDirectory``, which the kernel releases if a process dies). A plain read or write
/// of a directory does not wait for the items inside it, but a write with
/// ``WritingOptions/forDeleting``, ``WritingOptions/forMoving`` or ``WritingOptions/forReplacing``
/// waits for, and blocks, every coordinated access inside the directory. A coordination of
/// several items takes them all without deadlock, whatever order they are named in, and writers
/// are not starved by a stream of readers.
///
/// Registered ``FilePresenter``s, in this process and in every other process on the machine that
/// uses Concord with the same ``LockDirectory``, are asked to save, relinquish or accommodate a
/// deletion before the access (before any lock is taken), and told afterwards what changed, moved
/// or was deleted. Waiting for another process's presenters is bounded by ``timeout`` or
/// ``presenterResponseLimit``; a process that died is skipped. A writer that does not coordinate
/// cannot ask anyone first: presenters hear of its changes afterwards, through inotify.
///
/// The synchronous forms block the calling thread until the accessor has run, like Apple's. Do
/// not call them from Swift concurrency's cooperative threads; use the `async` form,
/// ``coordinate(with:byAccessor:)-5lp6b``, which waits on a thread of its own.
///
/// Nested coordinations (a coordination inside an accessor) by the same coordinator on the same
/// thread never wait for that coordinator's own locks. Nesting with a different coordinator can
/// deadlock, as on Apple's platforms: name every item in one coordination instead.
public final class FileCoordinator: Sendable {
    /// How a coordinated read treats presenters and symbolic links.
    public struct ReadingOptions: OptionSet, Sendable, Hashable {
        /// The option bits.
        public let rawValue: UInt
        /// Creates options from their bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// Do not ask presenters to save their changes first: read what is on disk now.
        public static let withoutChanges = ReadingOptions(rawValue: 1 << 0)
        /// If the item is a symbolic link, coordinate (and hand the accessor) the item it points to.
        public static let resolvesSymbolicLink = ReadingOptions(rawValue: 1 << 1)
    }

    /// What a coordinated write is going to do, which decides whom it waits for and what
    /// presenters are told.
    public struct WritingOptions: OptionSet, Sendable, Hashable {
        /// The option bits.
        public let rawValue: UInt
        /// Creates options from their bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }
        /// The item is going to be deleted: its presenters (and those of items inside it) are
        /// asked to accommodate the deletion; a directory's contents are locked too.
        public static let forDeleting = WritingOptions(rawValue: 1 << 0)
        /// The item is going to be moved (announce where with ``FileCoordinator/item(at:didMoveTo:)``);
        /// a directory's contents are locked too.
        public static let forMoving = WritingOptions(rawValue: 1 << 1)
        /// The write merges into the existing content: presenters are asked to save first.
        public static let forMerging = WritingOptions(rawValue: 1 << 2)
        /// The item is going to be replaced as a whole; a directory's contents are locked too.
        public static let forReplacing = WritingOptions(rawValue: 1 << 3)
    }

    private static let serials = Atomic<UInt64>(0)

    private struct State {
        var timeout: Duration?
        var active: [Int: CoordinationToken] = [:]
        var nextToken = 0
        /// Moves announced inside accessors, by the thread the accessor ran on.
        var pendingMoves: [(thread: UInt, from: URL, to: URL)] = []
    }

    private let serial: UInt64
    private let presenterIdentity: ObjectIdentifier?
    private let state: Mutex<State>

    /// Creates a coordinator.
    ///
    /// - Parameter filePresenter: the presenter this coordinator acts for, which gets no
    ///   messages about this coordinator's own accesses. Pass `nil` when there is none.
    public init(filePresenter: (any FilePresenter)? = nil) {
        serial = FileCoordinator.serials.add(1, ordering: .relaxed).newValue
        presenterIdentity = filePresenter.map { ObjectIdentifier($0) }
        state = Mutex(State(timeout: nil))
    }

    /// How long a coordination may wait for locks and presenters before it fails with
    /// ``FileCoordinationError/Code/timedOut``; `nil` (the default) waits as long as it takes.
    public var timeout: Duration? {
        get { state.withLock { $0.timeout } }
        set { state.withLock { $0.timeout = newValue } }
    }

    // MARK: - Presenters

    /// Registers a presenter: from now on it is messaged about coordinated access to its item,
    /// by coordinations in this process and in other processes (the process lists the items its
    /// presenters present in the lock directory and answers their requests on a socket there).
    ///
    /// The registry holds the presenter weakly; keep it alive, and remove it with
    /// ``removeFilePresenter(_:)`` when it stops presenting.
    public static func addFilePresenter(_ filePresenter: any FilePresenter) {
        PresenterRegistry.shared.add(filePresenter)
    }

    /// How long changes made outside this process are gathered before presenters hear of them
    /// (bursts of writes become one message). Takes effect if set before the first presenter is
    /// added; zero delivers each change as soon as the kernel reports it.
    public static var presenterSettleWindow: Duration {
        get { PresenterWatching.shared.settleWindow.withLock { $0 } }
        set { PresenterWatching.shared.settleWindow.withLock { $0 = newValue } }
    }

    /// How long a coordination waits for the presenters in another process to answer when the
    /// coordinator has no ``timeout`` (or a longer one): past it, the coordination fails with
    /// ``FileCoordinationError/Code/timedOut`` naming the process
    /// (``FileCoordinationError/presentingProcess``). Thirty seconds unless set.
    public static var presenterResponseLimit: Duration {
        get { responseLimit.withLock { $0 } }
        set { responseLimit.withLock { $0 = newValue } }
    }
    private static let responseLimit = Mutex<Duration>(.seconds(30))

    /// Where the coordination layer logs (it never bootstraps logging): presenter watches that
    /// could not be set up, inotify queue overflows. Set it before the first presenter is added.
    public static var logger: Logger {
        get { PresenterWatching.shared.logger.withLock { $0 } }
        set { PresenterWatching.shared.logger.withLock { $0 = newValue } }
    }

    /// Unregisters a presenter. Messages already sent to it may still arrive.
    public static func removeFilePresenter(_ filePresenter: any FilePresenter) {
        PresenterRegistry.shared.remove(filePresenter)
    }

    /// The presenters registered in this process.
    public static var filePresenters: [any FilePresenter] {
        PresenterRegistry.shared.snapshot().compactMap { $0.presenter }
    }

    // MARK: - Coordinating

    /// Reads one item once no writer is using it.
    ///
    /// - Parameter url: the item to read.
    /// - Parameter options: how to read it.
    /// - Parameter reader: gets the URL to read (the resolved target for
    ///   ``ReadingOptions/resolvesSymbolicLink``) and runs with the item's lock held.
    /// - Returns: what `reader` returns.
    /// - Throws: ``FileCoordinationError`` if the coordination fails (the reader then never runs),
    ///   or whatever `reader` throws.
    public func coordinate<T>(
        readingItemAt url: URL,
        options: ReadingOptions = [],
        byAccessor reader: (URL) throws -> T
    ) throws -> T {
        try coordinate(with: [.readingIntent(with: url, options: options)]) { urls in try reader(urls[0]) }
    }

    /// Writes one item once no reader or other writer is using it.
    public func coordinate<T>(
        writingItemAt url: URL,
        options: WritingOptions = [],
        byAccessor writer: (URL) throws -> T
    ) throws -> T {
        try coordinate(with: [.writingIntent(with: url, options: options)]) { urls in try writer(urls[0]) }
    }

    /// Reads one item and writes another in one coordination (copying, say), taking both
    /// without deadlock.
    public func coordinate<T>(
        readingItemAt readingURL: URL,
        options readingOptions: ReadingOptions = [],
        writingItemAt writingURL: URL,
        options writingOptions: WritingOptions = [],
        byAccessor readerWriter: (URL, URL) throws -> T
    ) throws -> T {
        try coordinate(with: [
            .readingIntent(with: readingURL, options: readingOptions),
            .writingIntent(with: writingURL, options: writingOptions),
        ]) { urls in try readerWriter(urls[0], urls[1]) }
    }

    /// Writes two items in one coordination (moving one onto the other, say), taking both
    /// without deadlock.
    public func coordinate<T>(
        writingItemAt url1: URL,
        options options1: WritingOptions = [],
        writingItemAt url2: URL,
        options options2: WritingOptions = [],
        byAccessor writer: (URL, URL) throws -> T
    ) throws -> T {
        try coordinate(with: [
            .writingIntent(with: url1, options: options1),
            .writingIntent(with: url2, options: options2),
        ]) { urls in try writer(urls[0], urls[1]) }
    }

    /// Accesses any number of items in one coordination, blocking the calling thread.
    ///
    /// - Parameter intents: the items and how each is accessed.
    /// - Parameter accessor: gets the URLs to use, in the order of `intents`.
    public func coordinate<T>(with intents: [FileAccessIntent], byAccessor accessor: ([URL]) throws -> T) throws -> T {
        try perform(intents, token: CoordinationToken(), accessor)
    }

    /// Accesses any number of items in one coordination, without blocking Swift concurrency's
    /// threads: the waiting and the accessor run on a thread of their own. Cancelling the task
    /// cancels the wait (the accessor, once started, runs to its end).
    public func coordinate<T: Sendable>(
        with intents: [FileAccessIntent],
        byAccessor accessor: @escaping @Sendable ([URL]) throws -> T
    ) async throws -> T {
        let token = CoordinationToken()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                Thread.detachNewThread {
                    continuation.resume(with: Result { try self.perform(intents, token: token, accessor) })
                }
            }
        } onCancel: {
            token.cancel()
        }
    }

    /// Announces, inside a writing accessor, that the item at `oldURL` is about to move to `newURL`.
    public func item(at oldURL: URL, willMoveTo newURL: URL) {
        // Presenters in this process learn of the move once it is done (`item(at:didMoveTo:)`).
        // Other processes see it through inotify, which cannot follow an item into a directory
        // they do not watch: leave them a note.
        MoveJournal.record(from: oldURL.standardizedFileURL.path, to: newURL.standardizedFileURL.path)
    }

    /// Announces, inside a ``WritingOptions/forMoving`` accessor, that the item at `oldURL` now
    /// lives at `newURL`. Once the coordination ends, presenters of the item (and of items inside
    /// it) get ``FilePresenter/presentedItemDidMove(to:)`` and presenters of the directories
    /// involved get ``FilePresenter/presentedSubitem(at:didMoveTo:)``.
    public func item(at oldURL: URL, didMoveTo newURL: URL) {
        let deliverNow = state.withLock { state -> Bool in
            if state.active.isEmpty { return true }
            state.pendingMoves.append((Platform.currentThreadID, oldURL, newURL))
            return false
        }
        if deliverNow { announce(moves: [(oldURL, newURL)], outcomes: []) }
    }

    /// Cancels every coordination of this coordinator that is still waiting: each fails with
    /// ``FileCoordinationError/Code/cancelled`` and its accessor never runs. Accessors already
    /// running are not interrupted.
    public func cancel() {
        let tokens = state.withLock { Array($0.active.values) }
        for token in tokens { token.cancel() }
    }

    // MARK: - The pipeline

    private func perform<T>(
        _ intents: [FileAccessIntent],
        token: CoordinationToken,
        _ accessor: ([URL]) throws -> T
    ) throws -> T {
        let (key, deadline) = state.withLock { state -> (Int, Deadline?) in
            state.nextToken += 1
            state.active[state.nextToken] = token
            return (state.nextToken, Deadline.after(state.timeout))
        }
        defer { _ = state.withLock { $0.active.removeValue(forKey: key) } }

        // Resolve the items.
        var items: [CoordinatedItem] = []
        items.reserveCapacity(intents.count)
        for intent in intents {
            let resolve = intent.readingOptions.contains(.resolvesSymbolicLink)
            let path = try CanonicalPath.of(intent.url, resolvingLastComponent: resolve)
            items.append(
                CoordinatedItem(
                    intent: intent,
                    path: path,
                    accessorURL: resolve ? URL(fileURLWithPath: path) : intent.url
                )
            )
        }

        // Presenters first, with no lock held: a presenter may coordinate inside its hook.
        // One look at the registry serves both the messages and the echo marks below.
        let noPresenters = PresenterRegistry.shared.isEmpty
        let presenters = PresenterPlan(registry: .shared, excluding: presenterIdentity, knownEmpty: noPresenters)
        let reacquirers = try presenters?.prepare(items, deadline: deadline, token: token) ?? []
        // And the presenters in other processes, still with no lock held.
        let remote = RemotePresenters(items: items)
        do {
            try remote?.prepare(deadline: deadline, token: token)
        } catch {
            PresenterPlan.post(reacquirers)
            throw error
        }

        // Then the locks, in the global order.
        let table: ProcessLockTable
        let requests = LockPlan.requests(for: items)
        let owner = LockOwner.current(coordinator: serial)
        var held: [ProcessLockTable.Entry] = []
        held.reserveCapacity(requests.count)
        do {
            table = try ProcessLockTable.shared()
            for request in requests {
                do throws(LockFailure) {
                    held.append(
                        try table.acquire(request.name, request.mode, owner: owner, deadline: deadline, token: token)
                    )
                } catch {
                    throw error.coordinationError(
                        for: items[request.item].accessorURL,
                        mode: request.mode,
                        timeout: timeout
                    )
                }
            }
        } catch {
            if !held.isEmpty, let table = try? ProcessLockTable.shared() {
                for index in held.indices.reversed() { table.release(held[index], requests[index].mode, owner: owner) }
            }
            PresenterPlan.post(reacquirers)
            remote?.cancel()
            throw error
        }

        // The access itself. When presenters are registered, the watcher will see this write too:
        // mark it, so that echo is not delivered a second time.
        let writes = noPresenters ? [] : items.filter { $0.intent.isWriting }
        let watched = writes.map(\.path)
        if !watched.isEmpty { EchoFilter.shared.begin(watched, coversContents: writes.map(\.intent.coversContents)) }
        let anyPresenters = presenters != nil || remote != nil
        let existedBefore = anyPresenters ? items.map { $0.intent.isWriting && exists($0.path) } : []
        var value: T?
        var accessorError: (any Error)?
        do { value = try accessor(items.map(\.accessorURL)) } catch { accessorError = error }
        let existsAfter = anyPresenters ? items.map { $0.intent.isWriting && exists($0.path) } : []
        if !watched.isEmpty {
            EchoFilter.shared.end(watched, identities: watched.map { (try? FileSystem.identity(at: $0)) ?? nil })
        }
        for index in held.indices.reversed() { table.release(held[index], requests[index].mode, owner: owner) }

        // Presenters hear about it after every lock is released.
        let thread = Platform.currentThreadID
        let moves = state.withLock { state -> [(from: URL, to: URL)] in
            let mine = state.pendingMoves.filter { $0.thread == thread }.map { ($0.from, $0.to) }
            if !mine.isEmpty { state.pendingMoves.removeAll { $0.thread == thread } }
            return mine
        }
        PresenterPlan.post(reacquirers)
        if anyPresenters {
            let outcomes = items.indices.compactMap { index -> PresenterPlan.Outcome? in
                guard items[index].intent.isWriting else { return nil }
                return .init(item: items[index], existedBefore: existedBefore[index], existsAfter: existsAfter[index])
            }
            let moves = resolved(moves)
            if let presenters {
                presenters.finish(outcomes, moves: moves)
            } else if !moves.isEmpty {
                // Presenters registered in this process since the coordination began.
                PresenterPlan(registry: .shared, excluding: presenterIdentity)?.finish([], moves: moves)
            }
            remote?.finish(outcomes: outcomes, moves: moves)
        } else if !moves.isEmpty {
            announce(moves: moves, outcomes: [])
        }
        if let accessorError { throw accessorError }
        return value!
    }

    private func exists(_ path: String) -> Bool {
        ((try? FileSystem.identity(at: path)) ?? nil) != nil
    }

    private func resolved(_ moves: [(from: URL, to: URL)]) -> [(from: URL, fromPath: String, to: URL, toPath: String)] {
        moves.compactMap { move in
            guard let fromPath = try? CanonicalPath.of(move.from), let toPath = try? CanonicalPath.of(move.to) else {
                return nil
            }
            return (move.from, fromPath, move.to, toPath)
        }
    }

    private func announce(moves: [(from: URL, to: URL)], outcomes: [PresenterPlan.Outcome]) {
        PresenterPlan(registry: .shared, excluding: presenterIdentity)?.finish(outcomes, moves: resolved(moves))
    }
}

extension LockFailure {
    func coordinationError(for url: URL, mode: FileLockMode, timeout: Duration?) -> FileCoordinationError {
        switch self {
        case .timedOut:
            let limit = timeout.map { " (\($0))" } ?? ""
            return FileCoordinationError(
                code: .timedOut,
                url: url,
                message:
                    "waited longer than the coordinator's timeout\(limit) for the \(mode) lock it needs; another coordination holds the item"
            )
        case .cancelled:
            return FileCoordinationError(code: .cancelled, url: url, message: "the coordination was cancelled")
        case .system(let error):
            return .systemCall(error, url: url)
        }
    }
}
