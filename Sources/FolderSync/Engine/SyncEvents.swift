import Foundation
import Synchronization

/// Where sync's events go: the ``FolderSync/events()`` streams at once (their consumers run on
/// tasks of their own, so progress reaches them while the work goes on), and the rest of the
/// delivery (notifications, the delegate) once the sync lock is released, in order.
///
/// Every part of sync emits through this one channel (it is in the ``SyncContext``); app code
/// never runs under the sync lock.
final class SyncEvents: Sendable {
    private let listeners = Mutex<[UInt64: AsyncStream<SyncEvent>.Continuation]>([:])
    private let nextListener = Atomic<UInt64>(0)
    /// Delivers events to the app once the lock is released (the engine, once it exists).
    private let recipient = Mutex(Recipient())
    /// The problems already reported, so each is reported once (``isFirstReport(of:)``).
    private let reported = Mutex<Set<String>>([])
    private let syncLock: SyncLock

    init(syncLock: SyncLock) {
        self.syncLock = syncLock
    }

    /// Sets what delivers events to the app after the lock is released (held weakly).
    func deliver(through target: any SyncEventRecipient) {
        recipient.withLock { $0.target = target }
    }

    /// A stream of every event from now until its loop ends.
    func stream() -> AsyncStream<SyncEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: SyncEvent.self, bufferingPolicy: .unbounded)
        let token = nextListener.add(1, ordering: .relaxed).newValue
        listeners.withLock { $0[token] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.listeners.withLock { $0.removeValue(forKey: token) } }
        return stream
    }

    /// Ends every stream.
    func finish() {
        for continuation in listeners.withLock({ Array($0.values) }) { continuation.finish() }
    }

    /// Sends `event`: to the streams at once, to the app once the sync lock is released.
    func emit(_ event: SyncEvent) {
        for continuation in listeners.withLock({ Array($0.values) }) { continuation.yield(event) }
        guard let target = recipient.withLock({ $0.target }) else { return }
        syncLock.afterRelease { target.deliver(event) }
    }

    /// Tells the app of `conflict` once the sync lock is released (the delegate and a
    /// notification; see ``FolderSyncDelegate/folderSync(_:didKeepBothCreations:)``).
    func tell(_ conflict: CreationConflict) {
        guard let target = recipient.withLock({ $0.target }) else { return }
        syncLock.afterRelease { target.deliver(conflict) }
    }

    /// Whether the problem named `key` is reported for the first time (then it is remembered).
    func isFirstReport(of key: String) -> Bool {
        reported.withLock { $0.insert(key).inserted }
    }
}

/// What delivers sync's events to the app (notifications, the delegate).
protocol SyncEventRecipient: AnyObject, Sendable {
    /// Delivers `event`; called with no sync lock held.
    func deliver(_ event: SyncEvent)
    /// Delivers `conflict`; called with no sync lock held.
    func deliver(_ conflict: CreationConflict)
}

extension SyncEventRecipient {
    /// Delivers nothing.
    func deliver(_ conflict: CreationConflict) {}
}

private struct Recipient {
    weak var target: (any SyncEventRecipient)?
}
