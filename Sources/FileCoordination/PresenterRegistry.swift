import ConcordSystem
import Dispatch
import FileWatching
import Foundation
import Synchronization

/// The process's registered presenters, each with the serial queue its messages run on.
final class PresenterRegistry: Sendable {
    static let shared = PresenterRegistry()

    final class Registration: Sendable {
        weak let presenter: (any FilePresenter)?
        let identifier: ObjectIdentifier
        let queue: PresenterQueue
        /// The last presented URL's path and its canonical form, so a coordination does not
        /// resolve it again.
        let canonicalCache = Mutex<(String, String)?>(nil)
        /// The inotify watch that tells this presenter about changes from elsewhere.
        let watch = Mutex<(root: String, watch: InotifyWatcher.Watch)?>(nil)
        /// The watch that tells this presenter about its item's versions.
        let versionWatch = Mutex<VersionWatching.Watch?>(nil)

        init(_ presenter: any FilePresenter) {
            self.presenter = presenter
            self.identifier = ObjectIdentifier(presenter)
            self.queue = PresenterQueue()
        }

        /// The presenter's canonical item path, or `nil` if it presents nothing now.
        func canonicalPath() -> (any FilePresenter, String)? {
            guard let presenter, let url = presenter.presentedItemURL else { return nil }
            let path = url.path
            if let (cachedPath, canonical) = canonicalCache.withLock({ $0 }), cachedPath == path {
                return (presenter, canonical)
            }
            guard let canonical = try? CanonicalPath.of(url) else { return nil }
            canonicalCache.withLock { $0 = (path, canonical) }
            return (presenter, canonical)
        }
    }

    private let registrations = Mutex<[Registration]>([])

    func add(_ presenter: any FilePresenter) {
        let added = registrations.withLock { list -> Registration? in
            list.removeAll { $0.presenter == nil }
            if list.contains(where: { $0.identifier == ObjectIdentifier(presenter) && $0.presenter != nil }) {
                return nil
            }
            let registration = Registration(presenter)
            list.append(registration)
            return registration
        }
        if let added {
            PresenterWatching.shared.start(added)
            PresenterDirectory.shared.publish()
        }
    }

    func remove(_ presenter: any FilePresenter) {
        let removed = registrations.withLock { list -> [Registration] in
            let gone = list.filter { $0.presenter == nil || $0.identifier == ObjectIdentifier(presenter) }
            list.removeAll { $0.presenter == nil || $0.identifier == ObjectIdentifier(presenter) }
            return gone
        }
        for registration in removed { PresenterWatching.shared.stop(registration) }
        if !removed.isEmpty { PresenterDirectory.shared.publish() }
    }

    var isEmpty: Bool { registrations.withLock { $0.isEmpty } }

    func snapshot() -> [Registration] {
        registrations.withLock { list in list.filter { $0.presenter != nil } }
    }

    func registration(for presenter: any FilePresenter) -> Registration? {
        registrations.withLock { list in list.first { $0.identifier == ObjectIdentifier(presenter) } }
    }
}

/// A presenter's serial message queue.
///
/// Messages run one at a time, in the order they were sent. A message sent from code already
/// running on this queue (a presenter coordinating inside one of its own hooks) and waited for
/// runs at once on the same thread instead of waiting behind the hook that sent it, which would
/// never finish.
final class PresenterQueue: Sendable {
    private static let key = DispatchSpecificKey<UInt64>()
    private static let counter = Atomic<UInt64>(0)

    private let queue: DispatchQueue
    private let identifier: UInt64

    init() {
        identifier = PresenterQueue.counter.add(1, ordering: .relaxed).newValue
        queue = DispatchQueue(label: "concord.presenter.\(identifier)")
        queue.setSpecific(key: PresenterQueue.key, value: identifier)
    }

    /// Whether the calling code runs on this queue.
    var isCurrent: Bool { DispatchQueue.getSpecific(key: PresenterQueue.key) == identifier }

    /// Sends a message without waiting for it.
    func post(_ message: @escaping @Sendable () -> Void) {
        queue.async(execute: message)
    }

    /// Sends a message that answers through its completion, and waits for the answer.
    ///
    /// - Parameter late: gets an answer that arrives after the wait ended.
    func request<Answer: Sendable>(
        deadline: Deadline?,
        token: CoordinationToken,
        late: @escaping @Sendable (Answer) -> Void = { _ in },
        _ message: @escaping @Sendable (_ answer: @escaping @Sendable (Answer) -> Void) -> Void
    ) -> (WaitOutcome, Answer?) {
        let reply = OneShot<Answer>()
        let answer: @Sendable (Answer) -> Void = { value in
            if !reply.fulfil(value) { late(value) }
        }
        if isCurrent {
            message(answer)
        } else {
            queue.async { message(answer) }
        }
        return reply.wait(until: deadline, token: token)
    }
}
