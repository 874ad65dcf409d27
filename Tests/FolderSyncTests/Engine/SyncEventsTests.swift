import ConcordTestSupport
import Foundation
import Synchronization
import Testing

@testable import FolderSync

/// The one channel every part of sync emits through: streams hear an event at once, the app's
/// delivery (notifications, the delegate) waits until the sync lock is released.
@Suite("Sync events")
struct SyncEventsTests {
    let directory = TemporaryDirectory("sync-events")

    /// Records what it is handed, and whether the sync lock was held then.
    final class Recipient: SyncEventRecipient {
        let lock: SyncLock
        private let seen = Mutex<[(event: String, underLock: Bool)]>([])
        init(lock: SyncLock) { self.lock = lock }
        var deliveries: [(event: String, underLock: Bool)] { seen.withLock { $0 } }
        func deliver(_ event: SyncEvent) {
            let held = lock.isHeldByCurrentThread
            seen.withLock { $0.append(("\(event)", held)) }
        }
    }

    func lock() throws -> SyncLock {
        try SyncLock(storeURL: directory("store.json"), storeName: "notes") { _ in }
    }

    @Test("an event emitted under the sync lock reaches the streams at once and the app only once the lock is released")
    func deliveryWaitsForTheLock() async throws {
        let lock = try lock()
        let events = SyncEvents(syncLock: lock)
        let recipient = Recipient(lock: lock)
        events.deliver(through: recipient)
        let stream = events.stream()
        var iterator = stream.makeAsyncIterator()
        let duringLock = try lock.withLock { _ -> Int in
            events.emit(.waiting(files: 3))
            return recipient.deliveries.count
        }
        #expect(duringLock == 0, "the app was called under the sync lock")
        #expect(recipient.deliveries.map(\.event) == ["\(SyncEvent.waiting(files: 3))"])
        #expect(recipient.deliveries.allSatisfy { !$0.underLock })
        let streamed = await iterator.next()
        #expect(streamed.map { "\($0)" } == "\(SyncEvent.waiting(files: 3))")
    }

    @Test("without the lock held, the app hears an event at once; a finished channel ends its streams")
    func deliveryWithoutTheLock() async throws {
        let lock = try lock()
        let events = SyncEvents(syncLock: lock)
        let recipient = Recipient(lock: lock)
        events.deliver(through: recipient)
        let stream = events.stream()
        events.emit(.importStarted(logs: 2))
        #expect(recipient.deliveries.map(\.event) == ["\(SyncEvent.importStarted(logs: 2))"])
        events.finish()
        var received: [String] = []
        for await event in stream { received.append("\(event)") }
        #expect(received == ["\(SyncEvent.importStarted(logs: 2))"])
    }

    @Test("the recipient is held weakly: once it is gone, events still reach the streams and nothing else")
    func recipientHeldWeakly() async throws {
        let lock = try lock()
        let events = SyncEvents(syncLock: lock)
        weak var gone: Recipient?
        do {
            let recipient = Recipient(lock: lock)
            gone = recipient
            events.deliver(through: recipient)
        }
        #expect(gone == nil, "the channel kept its recipient alive")
        let stream = events.stream()
        events.emit(.waiting(files: 1))
        events.finish()
        var received = 0
        for await _ in stream { received += 1 }
        #expect(received == 1)
    }

    @Test("a problem is reported the first time its key is seen, and never again")
    func problemsReportedOnce() throws {
        let events = SyncEvents(syncLock: try lock())
        #expect(events.isFirstReport(of: "sentinels/a.plist|damaged"))
        #expect(!events.isFirstReport(of: "sentinels/a.plist|damaged"))
        #expect(events.isFirstReport(of: "sentinels/b.plist|damaged"))
    }
}
