#if canImport(Glibc)
import Glibc
#endif
import ConcordSystem
import Foundation
import Synchronization

/// The locks this process holds, and the `flock(2)` locks that carry them across processes.
///
/// Each lock name has one entry with one open file description of its lock file and one of its
/// gate file. Inside the process, holders are counted per owner (a coordinator), so an owner never
/// waits for itself and other threads join an existing shared lock without a system call. Across
/// processes, the process holds one `flock` on the lock file, in the strongest mode any of its
/// holders needs, and drops it when the last holder leaves.
///
/// Writers are not starved, neither here nor across processes. Here, a waiting writer stops new
/// readers from joining. Across processes, a writer holds the gate exclusively while it waits for
/// the lock, and a reader passes through the gate (shared, then released) before it takes the
/// lock: plain `flock` would let a stream of overlapping readers keep a writer out forever.
///
/// No system call that can block runs while the table's mutex is held: the thread that performs
/// one marks the entry busy, and others wait for that mark to clear.
final class ProcessLockTable: @unchecked Sendable {
    /// The table for this process's lock directory, resolved once (see ``LockDirectory``).
    static func shared() throws(FileCoordinationError) -> ProcessLockTable {
        if let table = current.withLock({ $0 }) { return table }
        let directory = try LockDirectory.resolved()
        return current.withLock { current in
            if let table = current { return table }
            let table = ProcessLockTable(directory: directory)
            current = table
            return table
        }
    }
    private static let current = Mutex<ProcessLockTable?>(nil)

    /// The directory of the lock files.
    let directory: String
    /// How many idle entries keep their descriptors open before the least recently used close.
    let maximumIdleEntries: Int

    private let condition = ConditionLock()
    private var entries: [String: Entry] = [:]
    private var clock: UInt64 = 0

    private struct Hold {
        var shared = 0
        var exclusive = 0
        var isEmpty: Bool { shared == 0 && exclusive == 0 }
    }

    private final class Entry {
        let lockPath: String
        let gatePath: String
        var fd: Int32 = -1
        var gateFD: Int32 = -1
        var holders: [LockOwner: Hold] = [:]
        var processMode: FileLockMode?
        var busy = false
        var passing = 0
        var waitingWriters = 0
        var remoteWriterQueued = false
        var lastUse: UInt64 = 0

        init(lockPath: String) {
            self.lockPath = lockPath
            self.gatePath = lockPath + ".gate"
        }

        var isIdle: Bool { holders.isEmpty && !busy && passing == 0 && waitingWriters == 0 }
        var hasExclusiveHolder: Bool { holders.values.contains { $0.exclusive > 0 } }
    }

    init(directory: String, maximumIdleEntries: Int = 128) {
        self.directory = directory
        self.maximumIdleEntries = maximumIdleEntries
    }

    private func entry(_ name: String) -> Entry {
        if let entry = entries[name] { return entry }
        let entry = Entry(lockPath: directory + "/" + name)
        entries[name] = entry
        return entry
    }

    /// Wakes every waiter (after a cancellation).
    func wakeAll() {
        condition.withLock { condition.broadcast() }
    }

    /// Takes the lock `name` in `mode` for `owner`.
    ///
    /// An owner that already holds the lock gets it again at once (shared inside exclusive, or
    /// a second hold of the same mode); asking for exclusive while holding shared upgrades.
    func acquire(
        _ name: String, _ mode: FileLockMode, owner: LockOwner, deadline: Deadline?, token: CoordinationToken
    ) throws(LockFailure) {
        condition.lock()
        defer { condition.unlock() }
        var countedAsWaitingWriter = false
        var countedEntry: Entry?
        defer {
            if countedAsWaitingWriter, let countedEntry {
                countedEntry.waitingWriters -= 1
                condition.broadcast()
            }
        }

        while true {
            if token.isCancelled { throw .cancelled }
            let entry = entry(name)

            if let hold = entry.holders[owner] {
                if mode == .shared || hold.exclusive > 0 || entry.processMode == .exclusive && entry.holders.count == 1 {
                    add(mode, owner: owner, to: entry)
                    return
                }
                if entry.holders.count == 1 && !entry.busy && entry.passing == 0 {
                    try crossProcess(entry, .exclusive, deadline: deadline, token: token, upgrading: true)
                    add(mode, owner: owner, to: entry)
                    return
                }
                try wait(until: deadline)
                continue
            }

            switch mode {
            case .shared:
                if entry.busy || entry.waitingWriters > 0 || entry.remoteWriterQueued || entry.hasExclusiveHolder {
                    try wait(until: deadline)
                    continue
                }
                if entry.processMode == nil {
                    try crossProcess(entry, .shared, deadline: deadline, token: token, upgrading: false)
                    add(.shared, owner: owner, to: entry)
                    return
                }
                // The process already holds the flock: join it, unless a writer in another
                // process is queued at the gate.
                entry.passing += 1
                condition.unlock()
                let open = Result { () throws(SystemCallError) in try passGateWithoutWaiting(entry) }
                condition.lock()
                entry.passing -= 1
                condition.broadcast()
                switch open {
                case .failure(let error): throw .system(error)
                case .success(true) where entry.processMode != nil:
                    add(.shared, owner: owner, to: entry)
                    return
                case .success(true):
                    continue
                case .success(false):
                    entry.remoteWriterQueued = true
                    continue
                }

            case .exclusive:
                if !countedAsWaitingWriter {
                    entry.waitingWriters += 1
                    countedAsWaitingWriter = true
                    countedEntry = entry
                }
                if entry.busy || !entry.holders.isEmpty || entry.passing > 0 {
                    try wait(until: deadline)
                    continue
                }
                entry.waitingWriters -= 1
                countedAsWaitingWriter = false
                try crossProcess(entry, .exclusive, deadline: deadline, token: token, upgrading: false)
                add(.exclusive, owner: owner, to: entry)
                return
            }
        }
    }

    /// Gives back one hold of `mode` taken by `owner`.
    func release(_ name: String, _ mode: FileLockMode, owner: LockOwner) {
        var toClose: [Int32] = []
        condition.withLock {
            guard let entry = entries[name], var hold = entry.holders[owner] else { return }
            switch mode {
            case .shared: hold.shared -= 1
            case .exclusive: hold.exclusive -= 1
            }
            entry.holders[owner] = hold.isEmpty ? nil : hold
            if entry.holders.isEmpty {
                entry.busy = true
                let fd = entry.fd
                condition.unlock()
                if fd >= 0 { try? FileLock.unlock(fd, path: entry.lockPath) }
                condition.lock()
                entry.busy = false
                entry.processMode = nil
                entry.remoteWriterQueued = false
                toClose = evictIdleEntries()
            }
            condition.broadcast()
        }
        for fd in toClose { FileLock.close(fd) }
    }

    // MARK: - Internals (called with the mutex held)

    private func add(_ mode: FileLockMode, owner: LockOwner, to entry: Entry) {
        var hold = entry.holders[owner] ?? Hold()
        switch mode {
        case .shared: hold.shared += 1
        case .exclusive: hold.exclusive += 1
        }
        entry.holders[owner] = hold
        clock += 1
        entry.lastUse = clock
        condition.broadcast()
    }

    private func wait(until deadline: Deadline?) throws(LockFailure) {
        if !condition.wait(until: deadline), let deadline, deadline.hasPassed { throw .timedOut }
    }

    /// Takes the process's `flock` in `mode`, with the entry marked busy and the mutex released.
    private func crossProcess(
        _ entry: Entry, _ mode: FileLockMode, deadline: Deadline?, token: CoordinationToken, upgrading: Bool
    ) throws(LockFailure) {
        entry.busy = true
        condition.unlock()
        let outcome = Result { () throws(LockFailure) in
            try takeFlock(entry, mode, deadline: deadline, token: token, upgrading: upgrading)
        }
        condition.lock()
        entry.busy = false
        condition.broadcast()
        switch outcome {
        case .success: entry.processMode = mode
        case .failure(let failure):
            if !upgrading { entry.processMode = nil }
            throw failure
        }
    }

    /// The `flock` sequence itself; runs without the mutex, the entry marked busy.
    private func takeFlock(
        _ entry: Entry, _ mode: FileLockMode, deadline: Deadline?, token: CoordinationToken, upgrading: Bool
    ) throws(LockFailure) {
        do {
            if entry.fd < 0 { entry.fd = try FileLock.openLockFile(at: entry.lockPath) }
            if entry.gateFD < 0 { entry.gateFD = try FileLock.openLockFile(at: entry.gatePath) }
        } catch {
            throw .system(error)
        }
        // The gate: a reader passes it; a writer holds it while it waits for the lock.
        try lockOrAbandon(entry, gate: true, mode, deadline: deadline, token: token)
        if mode == .shared { try? FileLock.unlock(entry.gateFD, path: entry.gatePath) }
        defer { if mode == .exclusive { try? FileLock.unlock(entry.gateFD, path: entry.gatePath) } }
        do {
            try lockOrAbandon(entry, gate: false, mode, deadline: deadline, token: token)
        } catch {
            if upgrading {
                // A flock conversion drops the shared lock while it waits; the remaining holders
                // must get it back before the failure is reported.
                restoreShared(entry)
            }
            throw error
        }
    }

    private func lockOrAbandon(
        _ entry: Entry, gate: Bool, _ mode: FileLockMode, deadline: Deadline?, token: CoordinationToken
    ) throws(LockFailure) {
        let fd = gate ? entry.gateFD : entry.fd
        let path = gate ? entry.gatePath : entry.lockPath
        let outcome: LockWait.Outcome
        do {
            outcome = try LockWait.lock(fd, mode, path: path, deadline: deadline, token: token)
        } catch {
            throw .system(error)
        }
        guard case .abandoned(let why) = outcome else { return }
        // The helper thread owns that descriptor now.
        if gate { entry.gateFD = -1 } else { entry.fd = -1 }
        throw why == .cancelled ? .cancelled : .timedOut
    }

    private func restoreShared(_ entry: Entry) {
        do {
            if entry.fd < 0 { entry.fd = try FileLock.openLockFile(at: entry.lockPath) }
            try FileLock.lock(entry.fd, .shared, path: entry.lockPath)
        } catch {
            // Nothing sensible remains: the holders keep running without the cross-process lock.
        }
    }

    /// A shared joiner's look at the gate: `false` if a writer elsewhere holds it.
    private func passGateWithoutWaiting(_ entry: Entry) throws(SystemCallError) -> Bool {
        if entry.gateFD < 0 { return true }
        guard try FileLock.tryLock(entry.gateFD, .shared, path: entry.gatePath) else { return false }
        try FileLock.unlock(entry.gateFD, path: entry.gatePath)
        return true
    }

    /// Drops the least recently used idle entries beyond the limit; returns descriptors to close.
    private func evictIdleEntries() -> [Int32] {
        guard entries.count > maximumIdleEntries else { return [] }
        let idle = entries.filter { $0.value.isIdle }
        guard idle.count > maximumIdleEntries else { return [] }
        let victims = idle.sorted { $0.value.lastUse < $1.value.lastUse }.prefix(idle.count - maximumIdleEntries * 3 / 4)
        var descriptors: [Int32] = []
        for (name, entry) in victims {
            if entry.fd >= 0 { descriptors.append(entry.fd) }
            if entry.gateFD >= 0 { descriptors.append(entry.gateFD) }
            entries.removeValue(forKey: name)
        }
        return descriptors
    }

    /// The number of entries with open descriptors (for tests).
    var cachedEntryCount: Int { condition.withLock { entries.count } }
}

/// Why a lock could not be taken.
enum LockFailure: Error {
    case timedOut
    case cancelled
    case system(SystemCallError)
}

/// Who holds a lock: one coordinator on one thread. A coordinator never waits for itself on the
/// thread it runs on (a coordination nested in an accessor), yet two threads sharing one
/// coordinator still exclude each other.
struct LockOwner: Hashable, Sendable {
    var coordinator: UInt64
    var thread: UInt

    static func current(coordinator: UInt64) -> LockOwner {
        LockOwner(coordinator: coordinator, thread: UInt(pthread_self()))
    }
}
