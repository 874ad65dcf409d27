import ConcordSystem
import FileCoordination
import Foundation
import Persistence
import Synchronization

/// Excludes, across threads *and processes*, everything that reads and rewrites one synced
/// store's sync state: commits (with their log-number allocation), imports, joins, compaction
/// and the outbox's bookkeeping.
///
/// Two processes of one device (an app and its command-line tool, an app and a background agent)
/// open the same store with their own ``FolderSync``; an in-process lock would let them allocate
/// the same log number, or apply one incoming log twice over each other's repairs. This lock is
/// Concord's cross-process primitive, `flock(2)` (``FileLock``), on a file in Concord's local lock
/// directory named after the store's file: never in the container, released by the kernel if the
/// process dies. (Nobody presents that file, so the coordinator's presenter machinery has nothing
/// to do for it: a save pays for one `flock`, not for a coordination.)
///
/// It is not reentrant. Whoever holds it holds a ``Permit``, given to the body of
/// ``withLock(_:catchingUp:_:)``: what must run under the lock and may also run on its own takes
/// the permit of a holder that calls it rather than taking the lock again, and the save an import
/// or a join makes under the lock finds the permit of its thread (a task-local value) when the
/// save's commit phase asks for the lock (``FolderSync/performCommits(_:)``). Taking the lock
/// again without the permit is a programming error, reported, never a deadlock. Other threads of
/// the same process wait on an in-process lock first, so only one thread per process waits on
/// the file lock. Work that must not run under a cross-process lock (delivering events to the
/// app) is queued with ``afterRelease(_:)`` and runs once the holder lets go.
final class SyncLock: @unchecked Sendable {
    /// Proof that the code holding it holds the lock, for as long as the body it was given to
    /// runs. It cannot be made outside ``SyncLock``; once the body returns it proves nothing.
    final class Permit: Sendable {
        fileprivate let lock: ObjectIdentifier
        /// The thread that holds the lock: a task started under it (which inherits the task-local
        /// permits) runs elsewhere, holds nothing, and waits for the lock like anyone else.
        fileprivate let thread = ObjectIdentifier(Thread.current)
        private let held = Atomic<Bool>(true)
        /// Work queued to run once the lock is released, in order.
        fileprivate let deferred = Mutex<[@Sendable () -> Void]>([])

        fileprivate init(lock: SyncLock) { self.lock = ObjectIdentifier(lock) }

        /// Whether this permit still proves that the lock is held.
        var isValid: Bool { held.load(ordering: .acquiring) }

        fileprivate func end() -> [@Sendable () -> Void] {
            held.store(false, ordering: .releasing)
            return deferred.withLock { work in
                defer { work = [] }
                return work
            }
        }
    }

    /// The permits the current thread (or task) holds, innermost last: one per lock it holds.
    @TaskLocal private static var permits: [Permit] = []

    /// The lock file: a name in the lock directory, never a file anybody presents.
    let item: URL
    /// `item`'s path (taken once: every save locks and unlocks).
    private let path: String
    /// Excludes this process's threads before one of them waits on the file lock.
    private let local = NSLock()
    /// This instance's own open file description of the lock file (opened at the first use; its
    /// lock excludes every other instance, in this process or another). Guarded by `local`.
    private var descriptor: Int32 = -1
    /// Called each time the lock is taken: the store's view of what other processes committed is
    /// brought up to date there, and with `true` the sync state too (a holder that reads that
    /// state anyway passes `false` and catches up itself).
    private let onAcquire: (_ catchingUp: Bool) throws -> Void

    /// A lock for the store at `storeURL`, synced under `storeName`.
    init(storeURL: URL, storeName: String, onAcquire: @escaping (_ catchingUp: Bool) throws -> Void) throws {
        let directory: String
        do {
            directory = try LockDirectory.resolved()
        } catch {
            throw SyncError(.ioFailed, "cannot resolve the lock directory: \(error)", url: storeURL, underlying: error)
        }
        let key = storeURL.resolvingSymlinksInPath().standardizedFileURL.path + "\u{0}" + storeName
        item = URL(fileURLWithPath: directory, isDirectory: true)
            .appendingPathComponent("sync-\(Self.digest(key))", isDirectory: false)
        path = item.path
        self.onAcquire = onAcquire
    }

    /// The permit of this lock that the current thread holds, if it holds the lock.
    var currentPermit: Permit? {
        let id = ObjectIdentifier(self)
        let thread = ObjectIdentifier(Thread.current)
        return Self.permits.last { $0.lock == id && $0.thread == thread && $0.isValid }
    }

    /// Whether the current thread holds the lock.
    var isHeldByCurrentThread: Bool { currentPermit != nil }

    /// Runs `body` holding the lock. With `permit`, a valid permit of this lock that the caller
    /// holds, `body` runs under it at once; without one, the lock is taken (and
    /// `catchingUp: false` leaves catching up with the sync state to `body`). A thread that holds
    /// the lock and asks for it again without its permit gets ``SyncError/Code/invalidState``.
    func withLock<T>(
        _ permit: Permit? = nil,
        catchingUp: Bool = true,
        _ body: (Permit) throws -> T
    ) throws -> T {
        if let permit, permit.lock == ObjectIdentifier(self), permit.thread == ObjectIdentifier(Thread.current),
            permit.isValid
        {
            return try body(permit)
        }
        guard currentPermit == nil else {
            assertionFailure("the sync lock was asked for again by a thread that holds it, without its permit")
            throw SyncError(
                .invalidState,
                "the sync lock was asked for again by a thread that holds it (it is not reentrant)",
                url: item
            )
        }
        local.lock()
        let permit = Permit(lock: self)
        defer {
            try? FileLock.unlock(descriptor, path: path)
            let deferred = permit.end()
            local.unlock()
            for work in deferred { work() }
        }
        do {
            if descriptor < 0 { descriptor = try FileLock.openLockFile(at: path) }
            try FileLock.lock(descriptor, .exclusive, path: path)
        } catch {
            throw SyncError(.ioFailed, "cannot take the sync lock: \(error)", url: item, underlying: error)
        }
        return try Self.$permits.withValue(Self.permits + [permit]) {
            try onAcquire(catchingUp)
            return try body(permit)
        }
    }

    /// Runs `work` now, or, when the current thread holds the lock, once it releases it (after
    /// the work queued before).
    func afterRelease(_ work: @escaping @Sendable () -> Void) {
        if let permit = currentPermit {
            permit.deferred.withLock { $0.append(work) }
        } else {
            work()
        }
    }

    /// Runs `body` holding the lock, once no other thread or process holds it; when the calling
    /// thread holds it (an entity policy of an import's save, say), once that thread releases it.
    func whenFree(_ body: @escaping @Sendable () -> Void) throws {
        if let permit = currentPermit {
            permit.deferred.withLock { $0.append { [self] in try? withLock { _ in body() } } }
            return
        }
        try withLock { _ in body() }
    }

    deinit {
        if descriptor >= 0 { FileLock.close(descriptor) }
    }

    /// FNV-1a (64 bits) in hex: a short, stable file name for any path.
    static func digest(_ text: String) -> String {
        let digits = String(LogScanner.digest(Data(text.utf8)), radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}

/// The bytes of the store's clock entry (``SyncMetadata/clock``) that this process last wrote or
/// read: the hybrid clock has seen them, so taking the sync lock need not decode them again.
final class StoredClock: Sendable {
    private let last = Mutex<Data?>(nil)

    func isLast(_ data: Data) -> Bool { last.withLock { $0 == data } }
    func remember(_ data: Data) { last.withLock { $0 = data } }
}
