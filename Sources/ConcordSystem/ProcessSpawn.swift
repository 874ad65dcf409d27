import CConcordShims
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// `posix_spawn(3)`, `kill(2)` and `waitpid(2)` for the processes tests start: a child with no
/// signal blocked and every signal at its default action, its standard input `/dev/null`, and no
/// other descriptor of this process than its standard output and error.
///
/// The spawning thread's mask is not inherited on purpose: Dispatch's worker threads block most
/// signals, so a child spawned from one with Foundation's `Process` never sees a `SIGTERM`.
public enum ProcessSpawn {
    /// The signal numbers a caller needs without the C library.
    public enum Signal {
        /// `SIGTERM`: asks a process to end.
        public static let terminate = SIGTERM
        /// `SIGKILL`: ends a process at once.
        public static let kill = SIGKILL
        /// `SIGINT`: an interrupt, as from the terminal.
        public static let interrupt = SIGINT
    }

    /// Starts `executable` with `arguments` (without the program name) and `environment`.
    ///
    /// - Parameters:
    ///   - standardOutput: the descriptor to give the child as its standard output.
    ///   - standardOutputPath: when set, the child's standard output is this file, opened for
    ///     writing, instead of `standardOutput`.
    ///   - standardError: the descriptor to give the child as its standard error, or `nil` to
    ///     leave it this process's.
    /// - Returns: the child's process id.
    public static func spawn(
        _ executable: String,
        arguments: [String],
        environment: [String: String],
        standardOutput: Int32,
        standardOutputPath: String? = nil,
        standardError: Int32? = nil
    ) throws(SystemCallError) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, standardOutput, 1)
        if let standardOutputPath { posix_spawn_file_actions_addopen(&actions, 1, standardOutputPath, O_WRONLY, 0) }
        if let standardError { posix_spawn_file_actions_adddup2(&actions, standardError, 2) }
        // Nothing else: a descriptor another thread opened without close-on-exec (Foundation's
        // file writes) would otherwise live, and stay open for writing, as long as the child.
        _ = concord_spawn_close_from(&actions, 3)

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

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw SystemCallError(systemCall: "posix_spawn", errno: Errno(rawValue: result), path: executable)
        }
        return pid
    }

    /// Sends `signal` to process `pid`; a process that is gone is not an error.
    public static func send(_ signal: Int32, to pid: Int32) { _ = kill(pid, signal) }

    /// Reaps child `pid` if it has ended (waiting for it to end when `blocking`).
    ///
    /// - Returns: the raw wait status, or `nil` while the child runs (or when it is not a child
    ///   of this process).
    public static func reap(_ pid: Int32, blocking: Bool) -> Int32? {
        var status: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &status, blocking ? 0 : WNOHANG) } while result < 0 && errno == EINTR
        return result == pid ? status : nil
    }

    /// Splits a raw wait status: the exit status, or the number of the signal that ended the process.
    public static func decode(_ status: Int32) -> (exitStatus: Int32?, signal: Int32?) {
        let signal = status & 0x7F
        return signal == 0 ? ((status >> 8) & 0xFF, nil) : (nil, signal)
    }

    /// Waits until `descriptor` has something to read (or its writer closed it), up to
    /// `milliseconds` (`0` looks without waiting), and reads what is there.
    ///
    /// - Returns: the bytes read; empty when nothing arrived in time; `nil` at the end of the
    ///   stream or on a read error.
    public static func read(_ descriptor: Int32, waitingUpTo milliseconds: Int32) -> [UInt8]? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let ready = poll(&poller, 1, milliseconds)
        if ready <= 0 { return [] }
        var chunk = [UInt8](repeating: 0, count: 4096)
        var count: Int
        repeat { count = Glibc.read(descriptor, &chunk, chunk.count) } while count < 0 && errno == EINTR
        if count <= 0 { return nil }
        return Array(chunk[..<count])
    }

    /// Closes `descriptor`, ignoring errors (for descriptors this process owns and is done with).
    public static func close(_ descriptor: Int32) { _ = Glibc.close(descriptor) }

    /// Sleeps the calling thread for `microseconds`: for bounded polls of something no event
    /// reports (a child's exit, when no `SIGCHLD` handler can be installed).
    public static func pause(microseconds: UInt32) { usleep(microseconds) }
}
