import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Unix-domain stream sockets on a path, wrapped once: what processes on one machine use to send
/// each other framed messages (a 4-byte big-endian length, then the bytes).
///
/// Every call retries `EINTR`; sends never raise `SIGPIPE`; waits take a deadline.
public enum LocalSocket {
    /// How a receive ended without a message.
    public enum ReceiveFailure: Error, Sendable {
        /// The peer closed the connection (or died).
        case closed
        /// The deadline passed first.
        case timedOut
        /// A system call failed.
        case system(SystemCallError)
    }

    /// The longest path a socket can be bound to or reached at (`sun_path`, less its terminator).
    public static let maximumPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    private static func withAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count <= maximumPathLength else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
            raw[bytes.count] = 0
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// Binds a listening socket at `path` (replacing a stale one there), close-on-exec.
    public static func listen(at path: String) throws(SystemCallError) -> Int32 {
        let fd = try retryingInterrupts("socket", path: path) {
            socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
        do throws(SystemCallError) {
            _ = unlink(path)
            guard let result = withAddress(path, { bind(fd, $0, $1) }) else {
                throw SystemCallError(systemCall: "bind", errno: .fileNameTooLong, path: path)
            }
            if result != 0 { throw SystemCallError(systemCall: "bind", errno: lastErrno, path: path) }
            try retryingInterrupts("listen", path: path) { Glibc.listen(fd, 64) }
            return fd
        } catch {
            _ = Glibc.close(fd)
            throw error
        }
    }

    /// Waits for the next connection on a listening socket.
    public static func accept(_ fd: Int32) throws(SystemCallError) -> Int32 {
        let connection = try retryingInterrupts("accept") { Glibc.accept(fd, nil, nil) }
        _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
        return connection
    }

    /// Connects to the socket at `path`; `nil` if nothing listens there (no socket, or its process
    /// is gone).
    ///
    /// A listener whose queue of pending connections is full (a process that stopped accepting)
    /// is tried again until `deadline`, then reported as `EAGAIN`: connecting never waits longer.
    public static func connect(to path: String, until deadline: Deadline?) throws(SystemCallError) -> Int32? {
        let fd = try retryingInterrupts("socket", path: path) {
            socket(
                AF_UNIX,
                Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
                0
            )
        }
        while true {
            guard let result = withAddress(path, { Glibc.connect(fd, $0, $1) }) else {
                _ = Glibc.close(fd)
                throw SystemCallError(systemCall: "connect", errno: .fileNameTooLong, path: path)
            }
            if result == 0 {
                // Blocking from here on; receives wait with `poll` and their own deadline.
                _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
                return fd
            }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN, let deadline, !deadline.hasPassed {
                usleep(1_000)
                continue
            }
            _ = Glibc.close(fd)
            if code == ENOENT || code == ECONNREFUSED || code == ENOTSOCK { return nil }
            throw SystemCallError(systemCall: "connect", errno: Errno(rawValue: code), path: path)
        }
    }

    /// Sends one framed message.
    public static func send(_ fd: Int32, _ message: [UInt8]) throws(SystemCallError) {
        let length = UInt32(message.count)
        var frame: [UInt8] = [
            UInt8(length >> 24), UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff), UInt8(length & 0xff),
        ]
        frame.append(contentsOf: message)
        var offset = 0
        while offset < frame.count {
            let sent = frame.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
            }
            if sent < 0 {
                if errno == EINTR { continue }
                throw SystemCallError(systemCall: "send", errno: lastErrno, path: nil)
            }
            offset += sent
        }
    }

    /// How long the rest of a frame may take once its first byte arrived. A frame is sent in one
    /// piece, so the rest is there or on its way; a peer that stops in the middle of one has lost
    /// the conversation.
    public static let partialFrameLimit: Duration = .seconds(10)

    /// Receives one framed message (at most `limit` bytes), waiting until `deadline` (`nil`: as
    /// long as it takes) for it to begin.
    ///
    /// The deadline bounds the wait for a message, never a message in the middle: once its first
    /// byte is read, the rest is read too (within ``partialFrameLimit``), so a caller that waits
    /// in slices and tries again after ``ReceiveFailure/timedOut`` never loses the framing of the
    /// connection. A frame cut short is an error (`ETIMEDOUT` from `recv`), not a time-out.
    public static func receive(
        _ fd: Int32,
        until deadline: Deadline?,
        limit: Int = 16 << 20
    ) throws(ReceiveFailure) -> [UInt8] {
        var frame = Frame()
        let header = try frame.receive(fd, 4, until: deadline)
        let length = Int(header[0]) << 24 | Int(header[1]) << 16 | Int(header[2]) << 8 | Int(header[3])
        guard length <= limit else {
            throw .system(SystemCallError(systemCall: "recv", errno: .messageTooLong, path: nil))
        }
        return try frame.receive(fd, length, until: deadline)
    }

    /// One frame being read: the caller's deadline until its first byte, then
    /// ``partialFrameLimit`` for the rest.
    private struct Frame {
        private var restDeadline: Deadline?

        mutating func receive(_ fd: Int32, _ count: Int, until deadline: Deadline?) throws(ReceiveFailure) -> [UInt8] {
            var bytes = [UInt8](repeating: 0, count: count)
            var offset = 0
            while offset < count {
                let bound = restDeadline ?? deadline
                var timeout: Int32 = -1
                if let bound {
                    // A deadline that passed still looks once, without waiting, at what is there.
                    let now = Deadline.now.nanoseconds
                    timeout =
                        bound.nanoseconds <= now ? 0 : Int32(min((bound.nanoseconds - now) / 1_000_000 + 1, 60_000))
                }
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let ready = poll(&descriptor, 1, timeout)
                if ready < 0 {
                    if errno == EINTR { continue }
                    throw .system(SystemCallError(systemCall: "poll", errno: lastErrno, path: nil))
                }
                if ready == 0 {
                    guard let bound, bound.hasPassed else { continue }
                    if restDeadline == nil { throw .timedOut }
                    throw .system(SystemCallError(systemCall: "recv", errno: .timedOut, path: nil))
                }
                let received = bytes.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + offset, count - offset, 0) }
                if received < 0 {
                    if errno == EINTR || errno == EAGAIN { continue }
                    if errno == ECONNRESET { throw .closed }
                    throw .system(SystemCallError(systemCall: "recv", errno: lastErrno, path: nil))
                }
                if received == 0 { throw .closed }
                if restDeadline == nil { restDeadline = Deadline.after(partialFrameLimit) }
                offset += received
            }
            return bytes
        }
    }

    /// Shuts down both directions, waking a thread blocked receiving on `fd`.
    public static func shutdown(_ fd: Int32) { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }

    /// Closes a socket.
    public static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Whether a process with this id exists (it may be another user's).
    public static func processExists(_ pid: Int32) -> Bool {
        Glibc.kill(pid, 0) == 0 || errno == EPERM
    }

    /// This process's id.
    public static var currentProcess: Int32 { Platform.processID }
}
