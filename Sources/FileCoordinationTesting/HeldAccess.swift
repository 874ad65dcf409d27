import FileCoordination
import Foundation

/// A coordinated access running on a thread of its own that stays inside its accessor until
/// released: the way a test makes "someone holds this item" true for exactly as long as it needs.
///
/// ```swift
/// let held = HeldAccess(writing: fileURL)            // another writer holds the file
/// #expect(!finishes(within: .milliseconds(200)) { try? FileCoordinator().coordinate(readingItemAt: fileURL) { _ in } })
/// held.end()
/// ```
public final class HeldAccess: @unchecked Sendable {
    /// Fires when the accessor starts running (or the coordination failed).
    public let entered = Signal()
    /// Fires when the coordination is over.
    public let finished = Signal()
    private let release = Signal()
    private let errorBox = ErrorBox()

    /// Starts the access and waits (bounded) until its accessor runs.
    public init(_ intents: [FileAccessIntent], coordinator: FileCoordinator = FileCoordinator()) {
        let entered = self.entered
        let finished = self.finished
        let release = self.release
        let errorBox = self.errorBox
        Thread.detachNewThread {
            do {
                try coordinator.coordinate(with: intents) { _ in
                    entered.fire()
                    release.wait(timeout: .seconds(60))
                }
            } catch {
                errorBox.set(error)
                entered.fire()
            }
            finished.fire()
        }
        entered.wait(timeout: .seconds(30))
    }

    /// Holds a coordinated read of `url` (see ``init(_:coordinator:)``).
    public convenience init(reading url: URL, options: FileCoordinator.ReadingOptions = []) {
        self.init([.readingIntent(with: url, options: options)])
    }

    /// Holds a coordinated write of `url` (see ``init(_:coordinator:)``).
    public convenience init(writing url: URL, options: FileCoordinator.WritingOptions = []) {
        self.init([.writingIntent(with: url, options: options)])
    }

    /// The error the coordination failed with, if it did.
    public var error: (any Error)? { errorBox.get() }

    /// Lets the accessor return and waits until the coordination is over.
    public func end() {
        release.fire()
        finished.wait(timeout: .seconds(30))
    }

    deinit { release.fire() }
}

final class ErrorBox: @unchecked Sendable {
    private let lock = NSLock()
    private var error: (any Error)?
    func set(_ error: any Error) { lock.withLock { self.error = error } }
    func get() -> (any Error)? { lock.withLock { error } }
}

/// Runs `body` on a new thread and reports whether it finished within `timeout`.
///
/// A `body` that has not finished goes on running on its thread; the caller should release
/// whatever it waits for (``HeldAccess/end()``, say).
public func finishes(within timeout: Duration, _ body: @escaping @Sendable () -> Void) -> Bool {
    let done = Signal()
    Thread.detachNewThread {
        body()
        done.fire()
    }
    return done.wait(timeout: timeout)
}

/// Runs `body` and returns the code of the `FileCoordinationError` it threw:
/// `nil` when it threw nothing or another error.
public func coordinationCode(_ body: () throws -> Void) -> FileCoordinationError.Code? {
    do {
        try body()
        return nil
    } catch let error as FileCoordinationError {
        return error.code
    } catch {
        return nil
    }
}
