#if canImport(Glibc)
import Glibc
#endif
import CConcordShims
import SystemPackage

/// The kernel's inotify, `eventfd` and `poll`, wrapped once.
public enum Inotify {
    /// Where to raise the limit that `ENOSPC` from `inotify_add_watch` means was reached.
    public static let watchLimitPath = "/proc/sys/fs/inotify/max_user_watches"

    /// Event bits, as the kernel defines them.
    public struct Mask: OptionSet, Sendable, Hashable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let modify = Mask(rawValue: 0x0000_0002)
        public static let attributes = Mask(rawValue: 0x0000_0004)
        public static let closeWrite = Mask(rawValue: 0x0000_0008)
        public static let movedFrom = Mask(rawValue: 0x0000_0040)
        public static let movedTo = Mask(rawValue: 0x0000_0080)
        public static let create = Mask(rawValue: 0x0000_0100)
        public static let delete = Mask(rawValue: 0x0000_0200)
        public static let deleteSelf = Mask(rawValue: 0x0000_0400)
        public static let moveSelf = Mask(rawValue: 0x0000_0800)
        public static let unmount = Mask(rawValue: 0x0000_2000)
        public static let queueOverflow = Mask(rawValue: 0x0000_4000)
        public static let ignored = Mask(rawValue: 0x0000_8000)
        public static let onlyDirectory = Mask(rawValue: 0x0100_0000)
        public static let dontFollow = Mask(rawValue: 0x0200_0000)
        public static let excludeUnlinked = Mask(rawValue: 0x0400_0000)
        public static let isDirectory = Mask(rawValue: 0x4000_0000)
    }

    /// One event read from an inotify descriptor.
    public struct Event: Sendable {
        public var watch: Int32
        public var mask: Mask
        public var cookie: UInt32
        /// The name inside the watched directory, empty for events about the watched item itself.
        public var name: String
    }

    /// `inotify_init1(IN_NONBLOCK | IN_CLOEXEC)`.
    public static func open() throws(SystemCallError) -> Int32 {
        try retryingInterrupts("inotify_init1") { inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) }
    }

    /// `inotify_add_watch`; `nil` if the path does not exist or is not a directory when one is required.
    public static func addWatch(_ fd: Int32, path: String, mask: Mask) throws(SystemCallError) -> Int32? {
        while true {
            let wd = inotify_add_watch(fd, path, mask.rawValue)
            if wd >= 0 { return wd }
            let code = errno
            if code == EINTR { continue }
            if code == ENOENT || code == ENOTDIR { return nil }
            throw SystemCallError(systemCall: "inotify_add_watch", errno: Errno(rawValue: code), path: path)
        }
    }

    /// `inotify_rm_watch`; a watch the kernel already dropped is fine.
    public static func removeWatch(_ fd: Int32, _ wd: Int32) {
        _ = inotify_rm_watch(fd, wd)
    }

    /// Reads every event available now (none if the queue is empty).
    public static func readEvents(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(SystemCallError) -> [Event] {
        var events: [Event] = []
        while true {
            let count = read(fd, buffer.baseAddress!, buffer.count)
            if count < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK { return events }
                throw SystemCallError(systemCall: "read", errno: Errno(rawValue: code), path: "inotify")
            }
            if count == 0 { return events }
            var offset = 0
            let header = MemoryLayout<inotify_event>.size
            while offset + header <= count {
                let base = buffer.baseAddress! + offset
                let wd = base.loadUnaligned(as: Int32.self)
                let mask = base.loadUnaligned(fromByteOffset: 4, as: UInt32.self)
                let cookie = base.loadUnaligned(fromByteOffset: 8, as: UInt32.self)
                let length = Int(base.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
                var name = ""
                if length > 0 {
                    let bytes = UnsafeRawBufferPointer(start: base + header, count: length)
                    let end = bytes.firstIndex(of: 0) ?? length
                    name = String(decoding: bytes[..<end], as: UTF8.self)
                }
                events.append(Event(watch: wd, mask: Mask(rawValue: mask), cookie: cookie, name: name))
                offset += header + length
            }
        }
    }

    /// `eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)`: a descriptor another thread writes to wake a `poll`.
    public static func openWakeup() throws(SystemCallError) -> Int32 {
        try retryingInterrupts("eventfd") { concord_eventfd_nonblocking() }
    }

    /// Wakes the thread polling `fd`.
    public static func wake(_ fd: Int32) {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(fd, $0.baseAddress!, 8) }
    }

    /// Clears the wakeups pending on `fd`.
    public static func drainWakeups(_ fd: Int32) {
        var value: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &value) { read(fd, $0.baseAddress!, 8) }
    }

    /// `poll` on `descriptors` for input, up to `timeoutMilliseconds` (-1 for no limit).
    /// - Returns: which descriptors are readable.
    public static func waitReadable(_ descriptors: [Int32], timeoutMilliseconds: Int32) throws(SystemCallError) -> [Bool] {
        var fds = descriptors.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while true {
            let result = poll(&fds, nfds_t(fds.count), timeoutMilliseconds)
            if result >= 0 { return fds.map { $0.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 } }
            if errno == EINTR { continue }
            throw SystemCallError(systemCall: "poll", errno: lastErrno, path: nil)
        }
    }
}
