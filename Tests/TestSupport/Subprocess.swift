#if canImport(Glibc)
import Glibc
#endif
import ConcordSystem
import Foundation
import Synchronization

/// A child process a test starts, owned by the value: spawned with no signal blocked and every
/// signal at its default action (the spawning thread's mask is not inherited: Dispatch's worker
/// threads, where tests run, block most signals, so a `SIGTERM` sent to a child spawned from
/// them with Foundation's `Process` is never delivered), its standard input `/dev/null`, its
/// standard output (and, when asked, its standard error) on pipes; killed with `SIGKILL` and
/// reaped when the value goes away, whatever the test's outcome.
public final class Subprocess: @unchecked Sendable {
    /// The child's process id.
    public let processIdentifier: Int32
    /// The read end of the child's standard output.
    public let standardOutput: Int32
    /// The read end of the child's standard error, when it was captured.
    public let standardError: Int32?
    /// The raw wait status, once the child has been reaped.
    private let reaped = Mutex<Int32?>(nil)

    /// Why a spawn failed.
    public struct SpawnError: Error, CustomStringConvertible {
        public let executable: String
        public let errno: Int32
        public var description: String { "posix_spawn(\(executable)): \(String(cString: strerror(errno))) (errno \(errno))" }
    }

    /// Starts `executable` with `arguments` and `environment` (this process's when `nil`);
    /// with `standardOutputPath`, its standard output is that file (opened for writing) instead
    /// of the pipe, which then reads as ended.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, captureStandardError: Bool = false,
        standardOutputPath: String? = nil
    ) throws {
        let outputPipe = try FileSystem.makePipe()
        let output = [outputPipe.read, outputPipe.write]
        var errors: [Int32] = [-1, -1]
        if captureStandardError {
            do {
                let pipe = try FileSystem.makePipe()
                errors = [pipe.read, pipe.write]
            } catch {
                close(output[0])
                close(output[1])
                throw error
            }
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        if let standardOutputPath { posix_spawn_file_actions_addopen(&actions, 1, standardOutputPath, O_WRONLY, 0) }
        if captureStandardError { posix_spawn_file_actions_adddup2(&actions, errors[1], 2) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in 1..<32 where signal != SIGKILL && signal != SIGSTOP { sigaddset(&defaults, Int32(signal)) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let environment = environment ?? ProcessInfo.processInfo.environment
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        close(output[1])
        if captureStandardError { close(errors[1]) }
        guard result == 0 else {
            close(output[0])
            if captureStandardError { close(errors[0]) }
            throw SpawnError(executable: executable, errno: result)
        }
        processIdentifier = pid
        standardOutput = output[0]
        standardError = captureStandardError ? errors[0] : nil
    }

    deinit {
        if reaped.withLock({ $0 }) == nil {
            _ = Glibc.kill(processIdentifier, SIGKILL)
            var status: Int32 = 0
            while waitpid(processIdentifier, &status, 0) < 0 && errno == EINTR {}
        }
        close(standardOutput)
        if let standardError { close(standardError) }
    }

    /// Sends `signal` to the child (nothing once it has been reaped).
    public func send(_ signal: Int32) {
        if reaped.withLock({ $0 }) == nil { _ = Glibc.kill(processIdentifier, signal) }
    }

    /// Whether the child has not exited yet (reaps it if it has).
    public var isRunning: Bool { poll() == nil }

    /// The raw wait status if the child has exited (reaping it), `nil` while it runs.
    private func poll() -> Int32? {
        reaped.withLock { reaped -> Int32? in
            if let reaped { return reaped }
            var status: Int32 = 0
            var result: pid_t
            repeat { result = waitpid(processIdentifier, &status, WNOHANG) } while result < 0 && errno == EINTR
            if result == processIdentifier { reaped = status }
            return reaped
        }
    }

    /// How the child ended.
    public enum Termination: Equatable, Sendable, CustomStringConvertible {
        /// It exited with this status.
        case exited(Int32)
        /// A signal ended it.
        case signaled(Int32)

        public var description: String {
            switch self {
            case .exited(let status): return "exit status \(status)"
            case .signaled(let signal): return "signal \(signal)"
            }
        }
    }

    /// Waits up to `timeout` for the child to end; `nil` if it still runs then.
    public func wait(timeout: Duration) -> Termination? {
        let deadline = Deadline.after(timeout)!
        while true {
            if let status = poll() {
                let signal = status & 0x7F
                return signal == 0 ? .exited((status >> 8) & 0xFF) : .signaled(signal)
            }
            if deadline.hasPassed { return nil }
            usleep(2_000)  // a bounded poll for the exit, not a wait for an event that may not come
        }
    }

    /// Ends the child: `SIGTERM`, and `SIGKILL` if it has not ended `grace` later; reaps it.
    @discardableResult
    public func terminate(grace: Duration = .seconds(2)) -> Termination? {
        send(SIGTERM)
        if let ended = wait(timeout: grace) { return ended }
        send(SIGKILL)
        return wait(timeout: .seconds(10))
    }
}
