import ConcordSystem
import Foundation

/// A helper process whose presenters print every message they get (`present` in
/// ConcordTestHelper), and what a test has read of that so far.
public final class PresentingProcess: @unchecked Sendable {
    public let child: ChildProcess
    private var log: [(tag: String, message: String)] = []

    /// Starts the helper presenting `paths` with `options` (see `runPresent`), and waits (bounded)
    /// until its presenters are registered.
    public init(_ paths: [URL], options: [String] = []) throws {
        child = try ChildProcess(["present"] + options + paths.map(\.path))
        guard child.waitForLine("presenting") else {
            throw CocoaError(
                .fileReadUnknown,
                userInfo: [NSLocalizedDescriptionKey: "the presenting helper did not start"]
            )
        }
    }

    /// The helper's process id.
    public var pid: Int32 { child.process.processIdentifier }

    /// The messages presenter `tag` got, as read so far.
    public func messages(_ tag: String = "p0") -> [String] {
        log.filter { $0.tag == tag }.map(\.message)
    }

    /// Reads whatever the helper printed by now, without waiting.
    public func drain() {
        while let line = child.readLine(timeout: .zero) { record(line) }
    }

    /// Waits until presenter `tag` got `count` messages, within `timeout`.
    @discardableResult
    public func wait(count: Int, from tag: String = "p0", timeout: Duration = .seconds(20)) -> Bool {
        let deadline = Deadline.after(timeout)!
        while messages(tag).count < count {
            let remaining = Int64(deadline.nanoseconds) - Int64(Deadline.now.nanoseconds)
            if remaining <= 0 { return false }
            guard let line = child.readLine(timeout: .nanoseconds(remaining)) else { return false }
            record(line)
        }
        return true
    }

    /// Waits until presenter `tag` got `message`, within `timeout`.
    @discardableResult
    public func wait(for message: String, from tag: String = "p0", timeout: Duration = .seconds(20)) -> Bool {
        let deadline = Deadline.after(timeout)!
        while !messages(tag).contains(message) {
            let remaining = Int64(deadline.nanoseconds) - Int64(Deadline.now.nanoseconds)
            if remaining <= 0 { return false }
            guard let line = child.readLine(timeout: .nanoseconds(remaining)) else { return false }
            record(line)
        }
        return true
    }

    private func record(_ line: String) {
        guard let space = line.firstIndex(of: " ") else { return }
        log.append((String(line[..<space]), String(line[line.index(after: space)...])))
    }
}
