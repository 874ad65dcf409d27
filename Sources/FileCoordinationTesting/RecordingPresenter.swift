internal import ConcordSystem
import FileCoordination
import Foundation
import Synchronization

/// A presenter that records every message it gets, in order, and lets a test wait for them with
/// a bound.
///
/// Register it as any presenter, make something happen, then wait for the messages you expect:
///
/// ```swift
/// let presenter = RecordingPresenter(fileURL)
/// FileCoordinator.addFilePresenter(presenter)
/// defer { FileCoordinator.removeFilePresenter(presenter) }
/// try FileCoordinator().replaceContentsOfItem(at: fileURL, with: data)   // or another process
/// #expect(presenter.wait(for: ["relinquishToWriter", "didChange"]))
/// ```
///
/// The recorded names: `"relinquishToReader"`, `"relinquishToWriter"`, `"reacquire"` (the
/// reacquirer it handed over ran), `"save"`, `"accommodateDeletion"`, `"didMove:NAME"`,
/// `"didChange"`, `"subitemDidAppear:NAME"`, `"subitemDidChange:NAME"`,
/// `"subitemDidMove:OLD->NEW"`, `"subitemDeletion:NAME"`, and for versions (`FileVersion`)
/// `"didGainVersion:COPY"`, `"didLoseVersion:COPY"`, `"didResolveConflict:COPY"`,
/// `"subitemDidGainVersion:ITEM/COPY"`, `"subitemDidLoseVersion:ITEM/COPY"` and
/// `"subitemDidResolveConflict:ITEM/COPY"`, where the names are last path components. ``onMessage(_:_:)`` runs code inside a hook, to veto (throw) or to coordinate
/// from within it.
public final class RecordingPresenter: FilePresenter, @unchecked Sendable {
    private let condition = ConditionLock()
    private var url: URL?
    private var log: [String] = []
    private var callbacks: [String: @Sendable () throws -> Void] = [:]

    /// Creates a presenter of `url` (not yet registered).
    public init(_ url: URL) { self.url = url }

    /// The presented item: the URL it was made with, then where ``presentedItemDidMove(to:)`` said
    /// it went.
    public var presentedItemURL: URL? { condition.withLock { url } }

    /// The messages so far, for example `"relinquishToWriter"`, `"didChange"`,
    /// `"subitemDidChange:name"`.
    public var messages: [String] { condition.withLock { log } }

    /// Runs `body` inside the next hook named `message` (as recorded), before it returns; once.
    public func onMessage(_ message: String, _ body: @escaping @Sendable () throws -> Void) {
        condition.withLock { callbacks[message] = body }
    }

    /// Waits until the messages include every one of `expected` (in any order), within `timeout`.
    ///
    /// - Returns: whether they did; `false` means the bound passed first.
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

    /// Waits until at least `count` messages arrived, within `timeout`.
    ///
    /// - Returns: whether they did.
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

    /// Records `"relinquishToReader"`, hands the item over at once, and records `"reacquire"` when
    /// the reader is done.
    public func relinquishPresentedItem(toReader reader: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        try? record("relinquishToReader")
        reader { [self] in try? record("reacquire") }
    }

    /// Records `"relinquishToWriter"`, hands the item over at once, and records `"reacquire"` when
    /// the writer is done.
    public func relinquishPresentedItem(toWriter writer: @escaping @Sendable ((@Sendable () -> Void)?) -> Void) {
        try? record("relinquishToWriter")
        writer { [self] in try? record("reacquire") }
    }

    /// Records `"save"`; throws what an ``onMessage(_:_:)`` callback for it throws.
    public func savePresentedItemChanges() throws { try record("save") }
    /// Records `"accommodateDeletion"`; throws what an ``onMessage(_:_:)`` callback for it throws.
    public func accommodatePresentedItemDeletion() throws { try record("accommodateDeletion") }

    /// Follows the item to `newURL` and records `"didMove:NAME"`.
    public func presentedItemDidMove(to newURL: URL) {
        condition.withLock { url = newURL }
        try? record("didMove:\(name(newURL))")
    }

    /// Records `"didChange"`.
    public func presentedItemDidChange() { try? record("didChange") }
    /// Records `"subitemDidAppear:NAME"`.
    public func presentedSubitemDidAppear(at url: URL) { try? record("subitemDidAppear:\(name(url))") }
    /// Records `"subitemDidChange:NAME"`.
    public func presentedSubitemDidChange(at url: URL) { try? record("subitemDidChange:\(name(url))") }
    /// Records `"subitemDidMove:OLD->NEW"`.
    public func presentedSubitem(at oldURL: URL, didMoveTo newURL: URL) {
        try? record("subitemDidMove:\(name(oldURL))->\(name(newURL))")
    }
    /// Records `"subitemDeletion:NAME"`; throws what an ``onMessage(_:_:)`` callback for it throws.
    public func accommodatePresentedSubitemDeletion(at url: URL) throws { try record("subitemDeletion:\(name(url))") }

    /// Records `"didGainVersion:COPY"`.
    public func presentedItemDidGain(_ version: FileVersion) { try? record("didGainVersion:\(name(version.url))") }
    /// Records `"didLoseVersion:COPY"`.
    public func presentedItemDidLose(_ version: FileVersion) { try? record("didLoseVersion:\(name(version.url))") }
    /// Records `"didResolveConflict:COPY"`.
    public func presentedItemDidResolveConflict(_ version: FileVersion) {
        try? record("didResolveConflict:\(name(version.url))")
    }
    /// Records `"subitemDidGainVersion:ITEM/COPY"`.
    public func presentedSubitem(at url: URL, didGain version: FileVersion) {
        try? record("subitemDidGainVersion:\(name(url))/\(name(version.url))")
    }
    /// Records `"subitemDidLoseVersion:ITEM/COPY"`.
    public func presentedSubitem(at url: URL, didLose version: FileVersion) {
        try? record("subitemDidLoseVersion:\(name(url))/\(name(version.url))")
    }
    /// Records `"subitemDidResolveConflict:ITEM/COPY"`.
    public func presentedSubitem(at url: URL, didResolve version: FileVersion) {
        try? record("subitemDidResolveConflict:\(name(url))/\(name(version.url))")
    }
}
