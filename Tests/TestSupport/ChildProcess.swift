#if canImport(Glibc)
import Glibc
#endif
import ConcordSystem
import Foundation

/// A real child process running the test helper, whose output lines a test can wait for.
///
/// It is spawned with a clean signal mask and killed and reaped when the value goes away (see
/// ``Subprocess``).
public final class ChildProcess: @unchecked Sendable {
    /// The running helper.
    public let process: Subprocess
    private var buffer = [UInt8]()

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
    public func readLine(timeout: Duration = .seconds(20)) -> String? {
        let deadline = Deadline.after(timeout)!
        let fd = process.standardOutput
        // Look at the pipe at least once, so a zero timeout reads what is already there.
        var looked = false
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            let remaining = Int64(deadline.nanoseconds) - Int64(Deadline.now.nanoseconds)
            if remaining <= 0 && looked { return nil }
            looked = true
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, remaining <= 0 ? 0 : Int32(min(remaining / 1_000_000 + 1, 1000)))
            if ready <= 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = read(fd, &chunk, chunk.count)
            if count <= 0 { return nil }
            buffer.append(contentsOf: chunk[..<count])
        }
    }

    /// Waits for a line equal to `expected`, skipping others; `false` on timeout.
    public func waitForLine(_ expected: String, timeout: Duration = .seconds(20)) -> Bool {
        let deadline = Deadline.after(timeout)!
        while !deadline.hasPassed {
            guard let line = readLine(timeout: .nanoseconds(Int64(deadline.nanoseconds - Deadline.now.nanoseconds))) else {
                return false
            }
            if line == expected { return true }
        }
        return false
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
        _ arguments: [String], timeout: Duration = .seconds(600), other: (String) -> Void = { _ in }
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
