import ConcordSystem
import Foundation
import Synchronization

/// The locks this process holds, and the `flock(2)` locks that carry them across processes.
///
/// Each lock name has one entry with one open file description of its lock file and one of its
/// gate file. Inside the process, holders are counted per owner (a coordinator on a thread), so
/// an owner never waits for itself and other threads join an existing shared lock without a
/// blocking call. Across processes, the process holds one `flock` on the lock file, in the
/// strongest mode any of its holders needs, and drops it when the last holder leaves.
///
/// Writers are not starved, neither here nor across processes. Here, a waiting writer stops new
/// readers from joining. Across processes, a writer holds a record lock on the gate file while
/// it waits for the lock, and a reader that finds the gate taken waits for it to be released
/// before it takes or joins the lock: plain `flock` would let a stream of overlapping readers keep
/// a writer out forever.
///
/// No call that can block runs while the table's mutex is held: the thread that makes one marks
/// the entry busy, and others wait for that mark to clear. Only a busy thread touches an entry's
/// descriptors, except that joining readers (counted in `passing`) test the gate through a
/// descriptor read under the mutex; a busy phase never starts while any are passing.
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
    private var entries: [LockName: Entry] = [:]
    private var clock: UInt64 = 0

    struct Hold {
        var shared = 0
        var exclusive = 0
        var isEmpty: Bool { shared == 0 && exclusive == 0 }
    }

    /// Holds per owner. Rarely more than one or two, so a short array beats hashing.
    struct Holders {
        private var storage: [(owner: LockOwner, hold: Hold)] = []

        subscript(owner: LockOwner) -> Hold? {
            get { storage.first { $0.owner == owner }?.hold }
            set {
                let index = storage.firstIndex { $0.owner == owner }
                switch (index, newValue) {
                case (let index?, let hold?): storage[index].hold = hold
                case (let index?, nil): storage.remove(at: index)
                case (nil, let hold?): storage.append((owner, hold))
                case (nil, nil): break
                }
            }
        }
        var count: Int { storage.count }
        var isEmpty: Bool { storage.isEmpty }
        var hasExclusive: Bool { storage.contains { $0.hold.exclusive > 0 } }
    }

    /// One lock's state in this process. Handed to the holder by ``acquire(_:_:owner:deadline:token:)``
    /// and back to ``release(_:_:owner:)``; an entry with holders is never evicted.
    final class Entry {
        let lockPath: String
        let gatePath: String
        var fd: Int32 = -1
        var gateFD: Int32 = -1
        var holders = Holders()
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

        var isQuiet: Bool { !busy && passing == 0 }
        var isIdle: Bool { holders.isEmpty && isQuiet && waitingWriters == 0 }
        var hasExclusiveHolder: Bool { holders.hasExclusive }
    }

    init(directory: String, maximumIdleEntries: Int = 128) {
        self.directory = directory
        self.maximumIdleEntries = maximumIdleEntries
    }

    private func entry(_ name: LockName) -> Entry {
        if let entry = entries[name] { return entry }
        let entry = Entry(lockPath: directory + "/" + name.fileName)
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
    /// a second hold of the same mode); asking for exclusive while holding shared upgrades. An
    /// upgrade waits for the other holders, in and out of the process, and does not queue at the
    /// gate (that could deadlock against a writer queued behind the upgrader's own shared lock).
    @discardableResult
    func acquire(
        _ name: LockName,
        _ mode: FileLockMode,
        owner: LockOwner,
        deadline: Deadline?,
        token: CoordinationToken
    ) throws(LockFailure) -> Entry {
        condition.lock()
        defer { condition.unlock() }
        var countedEntry: Entry?
        var waker: Int?
        defer {
            if let countedEntry {
                countedEntry.waitingWriters -= 1
                condition.broadcast()
            }
            if let waker { token.removeWaker(waker) }
        }
        func wait() throws(LockFailure) {
            if waker == nil {
                waker = token.addWaker { [self] in wakeAll() }
                if token.isCancelled { throw .cancelled }
            }
            if !condition.wait(until: deadline), let deadline, deadline.hasPassed { throw .timedOut }
        }

        while true {
            if token.isCancelled { throw .cancelled }
            let entry = entry(name)

            if let hold = entry.holders[owner] {
                if mode == .shared || hold.exclusive > 0 {
                    add(mode, owner: owner, to: entry)
                    return entry
                }
                guard entry.holders.count == 1 && entry.isQuiet else {
                    try wait()
                    continue
                }
                if entry.processMode != .exclusive {
                    try crossProcess(entry, .exclusive, deadline: deadline, token: token, upgrading: true)
                }
                add(.exclusive, owner: owner, to: entry)
                return entry
            }

            switch mode {
            case .shared:
                if !entry.isQuiet || entry.waitingWriters > 0 || entry.remoteWriterQueued || entry.hasExclusiveHolder {
                    try wait()
                    continue
                }
                if entry.processMode == nil {
                    try crossProcess(entry, .shared, deadline: deadline, token: token, upgrading: false)
                    add(.shared, owner: owner, to: entry)
                    return entry
                }
                // The process already holds the flock: join it, unless a writer in another
                // process is queued at the gate.
                let gate = entry.gateFD
                let gatePath = entry.gatePath
                entry.passing += 1
                condition.unlock()
                var queued = false
                var failure: SystemCallError?
                if gate >= 0 {
                    do { queued = try RecordLock.isHeldElsewhere(gate, conflictingWith: .shared, path: gatePath) } catch
                    { failure = error }
                }
                condition.lock()
                entry.passing -= 1
                condition.broadcast()
                if let failure { throw .system(failure) }
                switch queued {
                case false:
                    // Nothing can have taken the lock from us while we were passing; it may
                    // have been released, in which case the next round takes it afresh.
                    if entry.processMode != nil {
                        add(.shared, owner: owner, to: entry)
                        return entry
                    }
                case true:
                    if entry.processMode != nil && !entry.holders.isEmpty { entry.remoteWriterQueued = true }
                }

            case .exclusive:
                if countedEntry !== entry {
                    countedEntry?.waitingWriters -= 1
                    entry.waitingWriters += 1
                    countedEntry = entry
                }
                if !entry.isQuiet || !entry.holders.isEmpty {
                    try wait()
                    continue
                }
                entry.waitingWriters -= 1
                countedEntry = nil
                try crossProcess(entry, .exclusive, deadline: deadline, token: token, upgrading: false)
                add(.exclusive, owner: owner, to: entry)
                return entry
            }
        }
    }

    /// Gives back one hold of `mode` taken by `owner` on the entry ``acquire(_:_:owner:deadline:token:)`` returned.
    func release(_ entry: Entry, _ mode: FileLockMode, owner: LockOwner) {
        var toClose: [Int32] = []
        condition.lock()
        defer {
            condition.broadcast()
            condition.unlock()
            for fd in toClose { FileLock.close(fd) }
        }
        guard var hold = entry.holders[owner] else { return }
        switch mode {
        case .shared: hold.shared -= 1
        case .exclusive: hold.exclusive -= 1
        }
        entry.holders[owner] = hold.isEmpty ? nil : hold
        guard entry.holders.isEmpty else { return }
        // Holders are gone, so no one else is busy with this entry or passing its gate.
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
    }

    /// Takes the process's `flock` in `mode`, with the entry marked busy and the mutex released.
    private func crossProcess(
        _ entry: Entry,
        _ mode: FileLockMode,
        deadline: Deadline?,
        token: CoordinationToken,
        upgrading: Bool
    ) throws(LockFailure) {
        entry.busy = true
        condition.unlock()
        var failure: LockFailure?
        do { try takeLocks(entry, mode, deadline: deadline, token: token, upgrading: upgrading) } catch {
            failure = error
        }
        condition.lock()
        entry.busy = false
        condition.broadcast()
        if let failure {
            if !upgrading { entry.processMode = nil }
            throw failure
        }
        entry.processMode = mode
    }

    /// The lock sequence itself; runs without the mutex, the entry marked busy.
    private func takeLocks(
        _ entry: Entry,
        _ mode: FileLockMode,
        deadline: Deadline?,
        token: CoordinationToken,
        upgrading: Bool
    ) throws(LockFailure) {
        do {
            if entry.fd < 0 { entry.fd = try FileLock.openLockFile(at: entry.lockPath) }
            if entry.gateFD < 0 { entry.gateFD = try FileLock.openLockFile(at: entry.gatePath) }
        } catch {
            throw .system(error)
        }
        switch mode {
        case .shared:
            // Wait behind a writer queued at the gate, if there is one.
            let queued: Bool
            do {
                queued = try RecordLock.isHeldElsewhere(entry.gateFD, conflictingWith: .shared, path: entry.gatePath)
            } catch { throw .system(error) }
            if queued {
                try wait(entry, gate: true, .shared, deadline: deadline, token: token)
                try? RecordLock.unlock(entry.gateFD, path: entry.gatePath)
            }
            try wait(entry, gate: false, .shared, deadline: deadline, token: token)

        case .exclusive:
            var holdsGate = false
            if upgrading {
                holdsGate = (try? RecordLock.tryLock(entry.gateFD, .exclusive, path: entry.gatePath)) ?? false
            } else {
                try wait(entry, gate: true, .exclusive, deadline: deadline, token: token)
                holdsGate = true
            }
            defer { if holdsGate, entry.gateFD >= 0 { try? RecordLock.unlock(entry.gateFD, path: entry.gatePath) } }
            do {
                try wait(entry, gate: false, .exclusive, deadline: deadline, token: token)
            } catch {
                // A flock conversion drops the shared lock while it waits: the holders that
                // remain get it back (waiting as long as it takes) before the failure is reported.
                if upgrading { restoreShared(entry) }
                throw error
            }
        }
    }

    private func wait(
        _ entry: Entry,
        gate: Bool,
        _ mode: FileLockMode,
        deadline: Deadline?,
        token: CoordinationToken
    ) throws(LockFailure) {
        let fd = gate ? entry.gateFD : entry.fd
        let path = gate ? entry.gatePath : entry.lockPath
        let outcome: LockWait.Outcome
        do {
            if gate {
                outcome = try LockWait.acquire(
                    fd,
                    deadline: deadline,
                    token: token,
                    attempt: { () throws(SystemCallError) in try RecordLock.tryLock(fd, mode, path: path) },
                    block: { () throws(SystemCallError) in try RecordLock.lock(fd, mode, path: path) }
                )
            } else {
                outcome = try LockWait.acquire(
                    fd,
                    deadline: deadline,
                    token: token,
                    attempt: { () throws(SystemCallError) in try FileLock.tryLock(fd, mode, path: path) },
                    block: { () throws(SystemCallError) in try FileLock.lock(fd, mode, path: path) }
                )
            }
        } catch {
            throw .system(error)
        }
        guard case .abandoned(let why) = outcome else { return }
        if gate { entry.gateFD = -1 } else { entry.fd = -1 }
        throw why == .cancelled ? .cancelled : .timedOut
    }

    private func restoreShared(_ entry: Entry) {
        do {
            if entry.fd < 0 { entry.fd = try FileLock.openLockFile(at: entry.lockPath) }
            try FileLock.lock(entry.fd, .shared, path: entry.lockPath)
        } catch {
            // Out of descriptors or kernel lock records: the outer holders keep running without
            // the cross-process lock. There is nothing better to do, and nothing to report it to.
        }
    }

    /// Drops the least recently used idle entries beyond the limit; returns descriptors to close.
    private func evictIdleEntries() -> [Int32] {
        guard entries.count > maximumIdleEntries else { return [] }
        let idle = entries.filter { $0.value.isIdle }
        guard idle.count > maximumIdleEntries else { return [] }
        let victims = idle.sorted { $0.value.lastUse < $1.value.lastUse }.prefix(
            idle.count - maximumIdleEntries * 3 / 4
        )
        var descriptors: [Int32] = []
        for (name, entry) in victims {
            if entry.fd >= 0 { descriptors.append(entry.fd) }
            if entry.gateFD >= 0 { descriptors.append(entry.gateFD) }
            entries.removeValue(forKey: name)
        }
        return descriptors
    }
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
        LockOwner(coordinator: coordinator, thread: Platform.currentThreadID)
    }
}
