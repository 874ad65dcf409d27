import ConcordTestSupport
import Foundation
import Persistence
import Synchronization
import Testing

@testable import FolderSync

/// The sync lock alone: not reentrant, a holder's permit, work deferred until it lets go, and
/// exclusion between two instances (two processes' stand-ins) of one store's lock.
@Suite("Sync lock")
struct SyncLockTests {
    let directory = TemporaryDirectory("sync-lock")

    /// Counts the times a lock was taken.
    final class Acquisitions: Sendable {
        private let count = Mutex(0)
        var value: Int { count.withLock { $0 } }
        func note() { count.withLock { $0 += 1 } }
    }

    func lock(acquired: Acquisitions? = nil) throws -> SyncLock {
        try SyncLock(storeURL: directory("store.json"), storeName: "notes") { _ in acquired?.note() }
    }

    @Test(
        "a holder's permit runs nested work at once, without taking the lock again; after the body returns it proves nothing"
    )
    func permit() throws {
        let acquired = Acquisitions()
        let lock = try lock(acquired: acquired)
        #expect(!lock.isHeldByCurrentThread)
        let kept = try lock.withLock { permit -> SyncLock.Permit in
            #expect(lock.isHeldByCurrentThread)
            #expect(lock.currentPermit === permit)
            let nested = try lock.withLock(permit) { inner in inner === permit }
            #expect(nested)
            return permit
        }
        #expect(acquired.value == 1, "the nested work took the lock again")
        #expect(!kept.isValid)
        #expect(!lock.isHeldByCurrentThread)
        // A stale permit is no permit: the lock is taken.
        try lock.withLock(kept) { permit in #expect(permit !== kept) }
        #expect(acquired.value == 2)
    }

    @Test(
        "a task started under the lock inherits no permit: it runs on another thread and waits for the lock like anyone else"
    )
    func taskStartedUnderTheLockHoldsNothing() async throws {
        let lock = try lock()
        let released = Acquisitions()
        typealias Outcome = (inherited: Bool, usedThePermit: Bool, afterRelease: Bool)
        let task = try lock.withLock { permit -> Task<Outcome, Never> in
            let task = Task { () -> Outcome in
                // (Looked at while the holder still holds the lock, when the task starts at once,
                // as it does on a machine with a thread free: the holder's permit is valid then.
                // The holder does not wait for it: a test that blocks a thread of Swift
                // concurrency's pool while other tests hold the rest would wait for nothing.)
                let inherited = lock.currentPermit != nil
                let usedThePermit = (try? lock.withLock(permit) { used in used === permit }) ?? true
                return (inherited: inherited, usedThePermit: usedThePermit, afterRelease: released.value == 1)
            }
            // (The holder's last step under the lock: the task must see it when it gets in.)
            released.note()
            return task
        }
        let outcome = await task.value
        #expect(!outcome.inherited, "the task took the holder's permit for its own")
        #expect(!outcome.usedThePermit, "the task ran under the holder's permit instead of taking the lock")
        #expect(outcome.afterRelease, "the task got in before the holder was done")
    }

    @Test("work queued while the lock is held runs once the holder lets go, in order; with no holder, at once")
    func afterRelease() throws {
        let lock = try lock()
        let ran = Mutex<[String]>([])
        try lock.withLock { _ in
            lock.afterRelease { ran.withLock { $0.append("first, held: \(lock.isHeldByCurrentThread)") } }
            lock.afterRelease { ran.withLock { $0.append("second, held: \(lock.isHeldByCurrentThread)") } }
            #expect(ran.withLock { $0 }.isEmpty)
        }
        #expect(ran.withLock { $0 } == ["first, held: false", "second, held: false"])
        lock.afterRelease { ran.withLock { $0.append("at once") } }
        #expect(ran.withLock { $0 }.last == "at once")
    }

    @Test(
        "another instance of the same store's lock (another process's, by its own open file) waits until the holder lets go"
    )
    func exclusion() throws {
        let first = try lock()
        let second = try lock()
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let order = Mutex<[String]>([])
        let holder = DispatchGroup()
        holder.enter()
        Thread.detachNewThread {
            try? first.withLock { _ in
                order.withLock { $0.append("first in") }
                entered.signal()
                release.wait()
                order.withLock { $0.append("first out") }
            }
            holder.leave()
        }
        #expect(entered.wait(timeout: .now() + 20) == .success)
        let waiter = DispatchGroup()
        waiter.enter()
        Thread.detachNewThread {
            try? second.withLock { _ in order.withLock { $0.append("second in") } }
            waiter.leave()
        }
        // The second waits for as long as the first holds (a bounded look: it must not get in).
        #expect(waiter.wait(timeout: .now() + 0.3) == .timedOut)
        release.signal()
        #expect(waiter.wait(timeout: .now() + 20) == .success)
        #expect(holder.wait(timeout: .now() + 20) == .success)
        #expect(order.withLock { $0 } == ["first in", "first out", "second in"])
    }

    @Test(
        "an import's events reach NotificationCenter observers after the sync lock is released; the events() stream gets them too"
    )
    func importEventsAfterTheLock() async throws {
        let bench = try LifecycleBench.syncingByHand("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        for title in ["one", "two", "three"] { _ = try alpha.addNote(title) }
        try alpha.sync.exportPending()
        let heard = Mutex<[Bool]>([])
        let observer = NotificationCenter.default.addObserver(
            forName: .concordSyncEvent,
            object: beta.sync,
            queue: nil
        ) { _ in
            heard.withLock { $0.append(beta.sync.engine.syncLock.isHeldByCurrentThread) }
        }
        defer { NotificationCenter.default.removeObserver(observer) }
        let stream = beta.sync.events()
        let report = try beta.sync.importAvailable(batchSize: 1)
        #expect(report.logs == 3)
        #expect(try beta.titles() == ["one", "three", "two"])
        let observed = heard.withLock { $0 }
        #expect(!observed.isEmpty, "no event was posted")
        #expect(!observed.contains(true), "an observer ran under the sync lock")
        // (Stopping ends the stream after what it holds.)
        beta.sync.stop()
        var progress = 0
        for await event in stream {
            if case .importProgress = event { progress += 1 }
        }
        #expect(progress == 3)
    }
}
