internal import ConcordSystem
import Foundation
import Synchronization

/// A child process a test starts, owned by the value, whose output lines the test can wait for.
///
/// The child starts with no signal blocked and every signal at its default action (Dispatch's
/// worker threads, where tests run, block most signals, and a child started from one with
/// Foundation's `Process` inherits that mask, so a `SIGTERM` sent to it is never delivered), its
/// standard input `/dev/null`, its standard output (and, when asked, its standard error) on pipes.
/// When the value goes away the child is killed with `SIGKILL` and reaped, whatever the test's
/// outcome, so no test leaves a process behind.
///
/// ```swift
/// let server = try Subprocess("/usr/bin/my-agent", ["--serve", folder.path])
/// #expect(server.waitForLine("ready", timeout: .seconds(20)))
/// // ... drive it ...
/// #expect(server.terminate() == .exited(0))
/// ```
public final class Subprocess: @unchecked Sendable {
    /// The child's process id.
    public let processIdentifier: Int32
    /// The read end of the child's standard output (read it with ``readLine(timeout:)``, or
    /// directly; not both).
    public let standardOutput: Int32
    /// The read end of the child's standard error, when ``init(_:_:environment:captureStandardError:standardOutputPath:)``
    /// was asked to capture it.
    public let standardError: Int32?
    /// The raw wait status, once the child has been reaped.
    private let reaped = Mutex<Int32?>(nil)
    /// Standard output read but not yet returned as a line.
    private let pending = Mutex<[UInt8]>([])

    /// Why a child could not be started.
    public struct SpawnError: Error, CustomStringConvertible {
        /// The executable that was to run.
        public let executable: String
        /// The error number `posix_spawn` returned.
        public let errno: Int32
        /// The executable, the error's text and number.
        public let description: String
    }

    /// Starts `executable` (a path) with `arguments`.
    ///
    /// - Parameters:
    ///   - executable: the program's path.
    ///   - arguments: its arguments, without the program's name.
    ///   - environment: the child's environment; this process's when `nil`.
    ///   - captureStandardError: puts the child's standard error on a pipe (``standardError``)
    ///     instead of sharing this process's.
    ///   - standardOutputPath: when set, the child's standard output is this file, opened for
    ///     writing, and ``standardOutput`` reads as ended.
    /// - Throws: ``SpawnError`` when the child cannot be started.
    public init(
        _ executable: String,
        _ arguments: [String],
        environment: [String: String]? = nil,
        captureStandardError: Bool = false,
        standardOutputPath: String? = nil
    ) throws {
        let output = try FileSystem.makePipe()
        var errors: (read: Int32, write: Int32)?
        if captureStandardError {
            do {
                errors = try FileSystem.makePipe()
            } catch {
                ProcessSpawn.close(output.read)
                ProcessSpawn.close(output.write)
                throw error
            }
        }
        let pid: Int32
        do {
            pid = try ProcessSpawn.spawn(
                executable,
                arguments: arguments,
                environment: environment ?? ProcessInfo.processInfo.environment,
                standardOutput: output.write,
                standardOutputPath: standardOutputPath,
                standardError: errors?.write
            )
        } catch {
            for descriptor in [output.read, output.write, errors?.read, errors?.write].compactMap({ $0 }) {
                ProcessSpawn.close(descriptor)
            }
            throw SpawnError(executable: executable, errno: error.errno.rawValue, description: error.description)
        }
        ProcessSpawn.close(output.write)
        if let errors { ProcessSpawn.close(errors.write) }
        processIdentifier = pid
        standardOutput = output.read
        standardError = errors?.read
    }

    deinit {
        if reaped.withLock({ $0 }) == nil {
            ProcessSpawn.send(ProcessSpawn.Signal.kill, to: processIdentifier)
            _ = ProcessSpawn.reap(processIdentifier, blocking: true)
        }
        ProcessSpawn.close(standardOutput)
        if let standardError { ProcessSpawn.close(standardError) }
    }

    /// Sends `signal` (`SIGTERM`, say) to the child; nothing once it has been reaped.
    public func send(_ signal: Int32) {
        if reaped.withLock({ $0 }) == nil { ProcessSpawn.send(signal, to: processIdentifier) }
    }

    /// Whether the child has not ended yet (it is reaped if it has).
    public var isRunning: Bool { poll() == nil }

    /// The raw wait status if the child has ended (reaping it), `nil` while it runs.
    private func poll() -> Int32? {
        reaped.withLock { reaped -> Int32? in
            if let reaped { return reaped }
            reaped = ProcessSpawn.reap(processIdentifier, blocking: false)
            return reaped
        }
    }

    /// How the child ended.
    public enum Termination: Equatable, Sendable, CustomStringConvertible {
        /// It exited with this status.
        case exited(Int32)
        /// A signal ended it.
        case signaled(Int32)

        /// `"exit status N"` or `"signal N"`.
        public var description: String {
            switch self {
            case .exited(let status): return "exit status \(status)"
            case .signaled(let signal): return "signal \(signal)"
            }
        }
    }

    /// Waits up to `timeout` for the child to end.
    ///
    /// - Returns: how it ended, or `nil` if it still runs when `timeout` has passed.
    public func wait(timeout: Duration) -> Termination? {
        let deadline = Deadline.after(timeout)!
        while true {
            if let status = poll() {
                let (exitStatus, signal) = ProcessSpawn.decode(status)
                return exitStatus.map(Termination.exited) ?? .signaled(signal ?? 0)
            }
            if deadline.hasPassed { return nil }
            ProcessSpawn.pause(microseconds: 2_000)  // a bounded poll for the exit (no SIGCHLD handler)
        }
    }

    /// Ends the child: `SIGTERM`, then `SIGKILL` if it has not ended `grace` later; reaps it.
    ///
    /// - Returns: how it ended (`nil` only if even `SIGKILL` did not end it within 10 seconds).
    @discardableResult
    public func terminate(grace: Duration = .seconds(2)) -> Termination? {
        send(ProcessSpawn.Signal.terminate)
        if let ended = wait(timeout: grace) { return ended }
        send(ProcessSpawn.Signal.kill)
        return wait(timeout: .seconds(10))
    }
}

extension Subprocess {
    /// Waits up to `timeout` for the child's next line of standard output (without its newline).
    ///
    /// A zero `timeout` returns a line already printed, without waiting.
    ///
    /// - Returns: the line, or `nil` when none came in time or the output ended.
    public func readLine(timeout: Duration = .seconds(20)) -> String? {
        let deadline = Deadline.after(timeout)!
        var looked = false
        while true {
            let line = pending.withLock { buffer -> String? in
                guard let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
                defer { buffer.removeSubrange(...newline) }
                return String(decoding: buffer[..<newline], as: UTF8.self)
            }
            if let line { return line }
            let remaining = Int64(deadline.nanoseconds) - Int64(Deadline.now.nanoseconds)
            if remaining <= 0 && looked { return nil }
            looked = true
            let waitMilliseconds = remaining <= 0 ? 0 : Int32(min(remaining / 1_000_000 + 1, 1000))
            guard let bytes = ProcessSpawn.read(standardOutput, waitingUpTo: waitMilliseconds) else { return nil }
            pending.withLock { $0.append(contentsOf: bytes) }
        }
    }

    /// Waits up to `timeout` for a line of standard output for which `matches` holds, skipping
    /// (and returning) the lines before it.
    ///
    /// - Returns: the matching line, or `nil` when none came in time or the output ended; and
    ///   every line read, the match included.
    public func waitForLine(
        timeout: Duration = .seconds(20),
        where matches: (String) -> Bool
    ) -> (line: String?, lines: [String]) {
        let deadline = Deadline.after(timeout)!
        var lines: [String] = []
        while !deadline.hasPassed {
            let remaining = Int64(deadline.nanoseconds) - Int64(Deadline.now.nanoseconds)
            guard let line = readLine(timeout: .nanoseconds(max(remaining, 0))) else { break }
            lines.append(line)
            if matches(line) { return (line, lines) }
        }
        return (nil, lines)
    }

    /// Waits up to `timeout` for a line of standard output equal to `expected`, skipping others.
    ///
    /// - Returns: whether it came.
    public func waitForLine(_ expected: String, timeout: Duration = .seconds(20)) -> Bool {
        waitForLine(timeout: timeout) { $0 == expected }.line != nil
    }

    /// Reads the child's captured standard error until it ends (the child exits or closes it).
    ///
    /// - Returns: the text, or `""` when standard error was not captured.
    public func readStandardError() -> String {
        guard let standardError else { return "" }
        var bytes: [UInt8] = []
        while let chunk = ProcessSpawn.read(standardError, waitingUpTo: 1000) { bytes.append(contentsOf: chunk) }
        return String(decoding: bytes, as: UTF8.self)
    }
}
