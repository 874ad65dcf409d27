import ConcordTestSupport
import Foundation
import Synchronization
import Testing

/// A run of the built `concord` executable (beside the test bundle), as a user or a script runs it.
struct ConcordRun {
    /// The exit status (`nil`: a signal ended it, or it did not end within the bound).
    var status: Int32?
    var output: String
    var errors: String

    var lines: [String] { output.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) }

    /// The output parsed as a JSON object.
    func json() throws -> [String: Any] {
        try #require(
            try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any],
            "not a JSON object: \(output) \(errors)"
        )
    }

    /// The `concord` executable: `$CONCORD_EXECUTABLE`, or `concord` beside the running test bundle.
    static var executable: String {
        if let path = ProcessInfo.processInfo.environment["CONCORD_EXECUTABLE"] { return path }
        return URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("concord").path
    }

    /// Runs `concord arguments` to its end (at most `timeout`), collecting both streams.
    static func run(_ arguments: [String], timeout: Duration = .seconds(60)) throws -> ConcordRun {
        let child = try Subprocess(executable, arguments, captureStandardError: true)
        let output = Collected(child.standardOutput)
        let errors = Collected(child.standardError!)
        let ended = child.wait(timeout: timeout) ?? child.terminate()
        let status: Int32? = if case .exited(let code)? = ended { code } else { nil }
        // The child owns the descriptors the readers read: it lives until they are done.
        return withExtendedLifetime(child) { ConcordRun(status: status, output: output.text(), errors: errors.text()) }
    }

    /// A stream read to its end on a thread of its own (so a full pipe never blocks the child),
    /// whose text so far can be waited on.
    final class Collected: @unchecked Sendable {
        private let condition = NSCondition()
        private var data = Data()
        private var ended = false

        init(_ descriptor: Int32) {
            let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: false)
            Thread.detachNewThread { [self] in
                while true {
                    let chunk = handle.availableData
                    condition.lock()
                    if chunk.isEmpty { ended = true } else { data.append(chunk) }
                    condition.broadcast()
                    condition.unlock()
                    if chunk.isEmpty { return }
                }
            }
        }

        /// Waits (at most `timeout`) until the text contains `expected`; whether it does.
        func wait(for expected: String, timeout: TimeInterval = 20) -> Bool {
            let deadline = Date().addingTimeInterval(timeout)
            condition.lock()
            defer { condition.unlock() }
            while !String(decoding: data, as: UTF8.self).contains(expected) {
                if ended || !condition.wait(until: deadline) {
                    return String(decoding: data, as: UTF8.self).contains(expected)
                }
            }
            return true
        }

        /// The whole text, once the stream ended (at most 10 s after the child did).
        func text() -> String {
            let deadline = Date().addingTimeInterval(10)
            condition.lock()
            defer { condition.unlock() }
            while !ended && condition.wait(until: deadline) {}
            return String(decoding: data, as: UTF8.self)
        }
    }
}
