import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A `notes` command run as a separate process, whose output lines can be awaited with a bound.
/// The demo drives its two devices with it (and the sample's tests do too).
final class NotesProcess: @unchecked Sendable {
    let process = Process()
    let arguments: [String]
    private let output = Pipe()
    private let errors = Pipe()
    private var buffer: [UInt8] = []
    private var ended = false
    private let errorText = ErrorCollector()
    private let exited = DispatchSemaphore(value: 0)
    private var exitStatus: Int32?

    /// The `notes` executable: this one (the demo), or `$NOTES_EXECUTABLE`, or `notes` beside
    /// the running executable (a test bundle).
    static var executableURL: URL {
        if let path = ProcessInfo.processInfo.environment["NOTES_EXECUTABLE"] { return URL(fileURLWithPath: path) }
        let running = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        if running.lastPathComponent == "notes" { return running }
        return running.deletingLastPathComponent().appendingPathComponent("notes")
    }

    /// Starts `notes` with `arguments`.
    init(_ arguments: [String], environment: [String: String] = [:]) throws {
        self.arguments = arguments
        process.executableURL = Self.executableURL
        process.arguments = arguments
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { $1 }
        process.environment = merged
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        let exited = self.exited
        process.terminationHandler = { _ in exited.signal() }
        // The child inherits the spawning thread's signal mask, and Dispatch's threads (where
        // tests and callbacks run) block most signals: spawn with none blocked, or the `SIGTERM`
        // that stops `notes watch` would never be delivered.
        var none = sigset_t()
        sigemptyset(&none)
        var previous = sigset_t()
        pthread_sigmask(SIG_SETMASK, &none, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        try process.run()
        let descriptor = errors.fileHandleForReading.fileDescriptor
        let collector = errorText
        // read(2) itself, retried on EINTR: FileHandle's reads trap on an interrupted call, which
        // a test process that starts many children (each ending with a SIGCHLD) meets.
        Thread.detachNewThread {
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(descriptor, &chunk, chunk.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                collector.append(Data(chunk[..<count]))
            }
            collector.finish()
        }
    }

    /// A process still running is killed, and waited for (boundedly) so it is reaped; the pipes'
    /// read ends are closed (Foundation keeps them open otherwise: two descriptors lost per
    /// command, thousands in a long test run).
    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            _ = exited.wait(timeout: .now() + .seconds(10))
        }
        // (The error reader reaches the end once the process is gone; it closes its end then.)
        try? output.fileHandleForReading.close()
        errorText.closeWhenFinished(errors.fileHandleForReading)
    }

    /// The next line of standard output, waiting up to `timeout`; `nil` on timeout or at the end.
    func readLine(timeout: Duration = .seconds(20)) -> String? {
        let deadline = ContinuousClock.now + timeout
        let fd = output.fileHandleForReading.fileDescriptor
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            if ended { return nil }
            let remaining = deadline - ContinuousClock.now
            if remaining <= .zero { return nil }
            let milliseconds =
                remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(min(milliseconds, 1000)))
            if ready < 0 && errno != EINTR { ended = true }
            if ready <= 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = read(fd, &chunk, chunk.count)
            if count <= 0 {
                ended = true
                // A last line without a newline still counts.
                if !buffer.isEmpty { buffer.append(UInt8(ascii: "\n")) }
                continue
            }
            buffer.append(contentsOf: chunk[..<count])
        }
    }

    /// Reads lines until one satisfies `predicate`, up to `timeout`; returns every line read,
    /// and whether the last one matched.
    func readLines(
        until predicate: (String) -> Bool,
        timeout: Duration = .seconds(20)
    ) -> (lines: [String], found: Bool) {
        let deadline = ContinuousClock.now + timeout
        var lines: [String] = []
        while case let remaining = deadline - ContinuousClock.now, remaining > .zero {
            guard let line = readLine(timeout: remaining) else { break }
            lines.append(line)
            if predicate(line) { return (lines, true) }
        }
        return (lines, false)
    }

    /// Sends `signal` to the process.
    func signal(_ number: Int32) { _ = kill(process.processIdentifier, number) }

    /// Waits for the process to end, up to `timeout` (then kills it); returns its exit status,
    /// or `nil` if it had to be killed.
    func waitForExit(timeout: Duration = .seconds(30)) -> Int32? {
        if let exitStatus { return exitStatus }
        let nanoseconds = timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000
        guard exited.wait(timeout: .now() + .nanoseconds(Int(max(0, nanoseconds)))) == .success else {
            kill(process.processIdentifier, SIGKILL)
            _ = exited.wait(timeout: .now() + .seconds(5))
            return nil
        }
        exitStatus = process.terminationStatus
        return exitStatus
    }

    /// Everything the process wrote to standard error (complete once it has exited).
    var standardError: String { errorText.text(waitingUpTo: .seconds(5)) }

    /// Runs `notes` with `arguments` to the end (bounded by `timeout`; then it is killed).
    static func run(_ arguments: [String], timeout: Duration = .seconds(60)) throws -> Outcome {
        let child = try NotesProcess(arguments)
        let deadline = ContinuousClock.now + timeout
        var lines: [String] = []
        while let line = child.readLine(timeout: max(deadline - ContinuousClock.now, .milliseconds(1))) {
            lines.append(line)
        }
        let status = child.waitForExit(timeout: max(deadline - ContinuousClock.now, .seconds(1)))
        let crashed = status != nil && child.process.terminationReason == .uncaughtSignal
        return Outcome(status: crashed ? nil : status, crashed: crashed, lines: lines, errors: child.standardError)
    }

    /// How a run of `notes` ended.
    struct Outcome {
        /// The exit status; `nil` if it was killed by a signal (a crash, or the timeout).
        var status: Int32?
        /// Whether a signal ended it (a crash).
        var crashed: Bool
        /// Its standard output, line by line.
        var lines: [String]
        /// Its standard error.
        var errors: String
    }
}

/// Standard error as it arrives, from a reader thread.
final class ErrorCollector: @unchecked Sendable {
    private let condition = NSCondition()
    private var data = Data()
    private var done = false
    private var closing: FileHandle?

    func append(_ chunk: Data) {
        condition.lock()
        data.append(chunk)
        condition.unlock()
    }

    func finish() {
        condition.lock()
        done = true
        let handle = closing
        closing = nil
        condition.broadcast()
        condition.unlock()
        try? handle?.close()
    }

    /// Closes `handle` once the reader has finished (at once if it has).
    func closeWhenFinished(_ handle: FileHandle) {
        condition.lock()
        if done {
            condition.unlock()
            try? handle.close()
            return
        }
        closing = handle
        condition.unlock()
    }

    func text(waitingUpTo timeout: Duration) -> String {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date().addingTimeInterval(Double(timeout.components.seconds))
        while !done, condition.wait(until: deadline) {}
        return String(decoding: data, as: UTF8.self)
    }
}
