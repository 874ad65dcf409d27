@_exported import FileCoordinationTesting
import Foundation

/// A real child process running the project's test helper (`ConcordTestHelper`), whose output
/// lines a test can wait for: a ``Subprocess`` that knows where the helper is.
public final class ChildProcess: @unchecked Sendable {
    /// The running helper.
    public let process: Subprocess

    /// The helper executable, built beside the test bundle (`$CONCORD_TEST_HELPER` overrides).
    public static var helperURL: URL {
        if let path = ProcessInfo.processInfo.environment["CONCORD_TEST_HELPER"] { return URL(fileURLWithPath: path) }
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return executable.deletingLastPathComponent().appendingPathComponent("ConcordTestHelper")
    }

    /// Starts the helper with `arguments`.
    public init(_ arguments: [String], environment: [String: String] = [:]) throws {
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { $1 }
        process = try Subprocess(Self.helperURL.path, arguments, environment: merged)
    }

    /// Waits for the next output line, up to `timeout`. Returns `nil` on timeout or end of output.
    public func readLine(timeout: Duration = .seconds(20)) -> String? { process.readLine(timeout: timeout) }

    /// Waits for a line equal to `expected`, skipping others; `false` on timeout.
    public func waitForLine(_ expected: String, timeout: Duration = .seconds(20)) -> Bool {
        process.waitForLine(expected, timeout: timeout)
    }

    /// Sends `signal` to the process.
    public func kill(_ signal: Int32) { process.send(signal) }

    /// Waits for the process to exit, up to `timeout`; returns its exit status (the signal's
    /// number if a signal ended it), or `nil` if it is still running.
    public func waitForExit(timeout: Duration = .seconds(60)) -> Int32? {
        switch process.wait(timeout: timeout) {
        case .exited(let status)?: return status
        case .signaled(let signal)?: return signal
        case nil: return nil
        }
    }
}

extension ChildProcess {
    /// Runs the helper with `arguments` until it reports "rss BEFORE PEAK" (KiB: the resident set
    /// when its measured work began and the peak during it), handing every other line to
    /// `other`, and waits for it to exit. `nil` when it exited without a report.
    public static func memoryReport(
        _ arguments: [String],
        timeout: Duration = .seconds(600),
        other: (String) -> Void = { _ in }
    ) throws -> (before: Int, peak: Int, exitStatus: Int32?)? {
        let child = try ChildProcess(arguments)
        var result: (Int, Int)?
        while let line = child.readLine(timeout: timeout) {
            let fields = line.split(separator: " ")
            if fields.first == "rss", fields.count == 3, let before = Int(fields[1]), let peak = Int(fields[2]) {
                result = (before, peak)
                break
            }
            other(line)
        }
        let status = child.waitForExit()
        return result.map { ($0.0, $0.1, status) }
    }
}
