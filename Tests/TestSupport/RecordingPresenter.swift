import ConcordSystem
import FileCoordination
import Foundation
import Synchronization

/// A presenter that records every message it gets, in order, and lets a test wait for them.
public final class RecordingPresenter: FilePresenter, @unchecked Sendable {
    private let condition = ConditionLock()
    private var url: URL?
    private var log: [String] = []
    private var callbacks: [String: @Sendable () throws -> Void] = [:]

    /// Creates a presenter of `url` (not yet registered).
    public init(_ url: URL) { self.url = url }

    public var presentedItemURL: URL? { condition.withLock { url } }

    /// The messages so far, for example `"relinquishToWriter"`, `"didChange"`,
    /// `"subitemDidChange:name"`.
    public var messages: [String] { condition.withLock { log } }

    /// Runs `body` inside the next hook named `message` (as recorded), before it returns; once.
    public func onMessage(_ message: String, _ body: @escaping @Sendable () throws -> Void) {
        condition.withLock { callbacks[message] = body }
    }

    /// Waits until the messages include every one of `expected` (in any order), within `timeout`.
    @discardableResult
    public func wait(for expected: [String], timeout: Duration = .seconds(10)) -> Bool {
        let deadline = Deadline.after(timeout)
        return condition.withLock {
            while !expected.allSatisfy({ log.contains($0) }) {
                if !condition.wait(until: deadline) && !expected.allSatisfy({ log.contains($0) }) { return false }
            }
            return true
        }
    }

    /// Waits until at least `count` messages arrived.
    @discardableResult
    public func wait(count: Int, timeout: Duration = .seconds(10)) -> Bool {
        let deadline = Deadline.after(timeout)
        return condition.withLock {
            while log.count < count {
                if !condition.wait(until: deadline) && log.count < count { return false }
            }
            return true
        }
    }

    private func record(_ message: String) throws {
        let callback = condition.withLock { () -> (@Sendable () throws -> Void)? in
            log.append(message)
            condition.broadcast()
            return callbacks.removeValue(forKey: message)
        }
        try callback?()
    }

    private func name(_ url: URL) -> String { url.lastPathComponent }

    public func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        try? record("relinquishToReader")
        reader { [self] in try? record("reacquire") }
    }

    public func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        try? record("relinquishToWriter")
        writer { [self] in try? record("reacquire") }
    }

    public func savePresentedItemChanges() throws { try record("save") }
    public func accommodatePresentedItemDeletion() throws { try record("accommodateDeletion") }

    public func presentedItemDidMove(to newURL: URL) {
        condition.withLock { url = newURL }
        try? record("didMove:\(name(newURL))")
    }

    public func presentedItemDidChange() { try? record("didChange") }
    public func presentedSubitemDidAppear(at url: URL) { try? record("subitemDidAppear:\(name(url))") }
    public func presentedSubitemDidChange(at url: URL) { try? record("subitemDidChange:\(name(url))") }
    public func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {
        try? record("subitemDidMove:\(name(oldURL))->\(name(newURL))")
    }
    public func accommodatePresentedSubitemDeletion(at url: URL) throws { try record("subitemDeletion:\(name(url))") }
}
