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
/// It is reentrant on one thread: an import holds it and its save takes it again. Other threads of
/// the same process wait on an in-process lock first, so only one thread per process waits on the
/// file lock.
final class SyncLock: @unchecked Sendable {
    /// The lock file: a name in the lock directory, never a file anybody presents.
    let item: URL
    /// `item`'s path (taken once: every save locks and unlocks).
    private let path: String
    private let local = NSRecursiveLock()
    /// This instance's own open file description of the lock file (opened at the first use; its
    /// lock excludes every other instance, in this process or another).
    private var descriptor: Int32 = -1
    /// How deep the owning thread is (guarded by `local`).
    private var depth = 0
    /// The thread that holds the lock, if any.
    private let owner = Mutex<ObjectIdentifier?>(nil)
    /// What runs once the owning thread releases the lock (guarded by `local`).
    private var afterRelease: [() -> Void] = []

    /// Whether the calling thread holds the lock.
    var isHeldByCurrentThread: Bool { owner.withLock { $0 } == ObjectIdentifier(Thread.current) }
    /// Called each time the lock is taken from outside (not when re-entered): the store's view of
    /// what other processes committed is brought up to date there, and with `true` the sync state
    /// too (a holder that reads that state anyway passes `false` and catches up itself).
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

    /// Runs `body` holding the lock; `catchingUp: false` leaves catching up with the sync state
    /// to `body`.
    func withLock<T>(catchingUp: Bool = true, _ body: () throws -> T) throws -> T {
        local.lock()
        defer { local.unlock() }
        if depth > 0 {
            depth += 1
            defer { depth -= 1 }
            return try body()
        }
        do {
            if descriptor < 0 { descriptor = try FileLock.openLockFile(at: path) }
            try FileLock.lock(descriptor, .exclusive, path: path)
        } catch {
            throw SyncError(.ioFailed, "cannot take the sync lock: \(error)", url: item, underlying: error)
        }
        defer {
            try? FileLock.unlock(descriptor, path: path)
            let pending = afterRelease
            afterRelease = []
            for body in pending { body() }
        }
        depth += 1
        owner.withLock { $0 = ObjectIdentifier(Thread.current) }
        defer {
            owner.withLock { $0 = nil }
            depth -= 1
        }
        try onAcquire(catchingUp)
        return try body()
    }

    /// Runs `body` holding the lock, once no other thread or process holds it; when the calling
    /// thread holds it (an event of a save or an import), once that thread releases it.
    func whenFree(_ body: @escaping () -> Void) throws {
        local.lock()
        defer { local.unlock() }
        if depth > 0 {
            afterRelease.append(body)
            return
        }
        try withLock(body)
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
