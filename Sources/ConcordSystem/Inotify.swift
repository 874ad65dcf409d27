import CConcordShims
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The kernel's inotify, `eventfd` and `poll`, wrapped once.
public enum Inotify {
    /// Where to raise the limit that `ENOSPC` from `inotify_add_watch` means was reached.
    public static let watchLimitPath = "/proc/sys/fs/inotify/max_user_watches"

    /// Event bits, as the kernel defines them.
    public struct Mask: OptionSet, Sendable, Hashable {
        /// The kernel's bits.
        public let rawValue: UInt32
        /// A mask from the kernel's bits.
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        /// The file was written.
        public static let modify = Mask(rawValue: 0x0000_0002)
        /// Metadata changed.
        public static let attributes = Mask(rawValue: 0x0000_0004)
        /// A file open for writing was closed.
        public static let closeWrite = Mask(rawValue: 0x0000_0008)
        /// An entry was renamed away from the watched directory.
        public static let movedFrom = Mask(rawValue: 0x0000_0040)
        /// An entry was renamed into the watched directory.
        public static let movedTo = Mask(rawValue: 0x0000_0080)
        /// An entry was created in the watched directory.
        public static let create = Mask(rawValue: 0x0000_0100)
        /// An entry was deleted from the watched directory.
        public static let delete = Mask(rawValue: 0x0000_0200)
        /// The watched item itself was deleted.
        public static let deleteSelf = Mask(rawValue: 0x0000_0400)
        /// The watched item itself was moved.
        public static let moveSelf = Mask(rawValue: 0x0000_0800)
        /// The file system holding the item was unmounted.
        public static let unmount = Mask(rawValue: 0x0000_2000)
        /// The event queue overflowed; events were lost.
        public static let queueOverflow = Mask(rawValue: 0x0000_4000)
        /// The watch was removed (explicitly, or because the item is gone).
        public static let ignored = Mask(rawValue: 0x0000_8000)
        /// Watch the path only if it is a directory.
        public static let onlyDirectory = Mask(rawValue: 0x0100_0000)
        /// Do not follow a symbolic link in the last component.
        public static let dontFollow = Mask(rawValue: 0x0200_0000)
        /// Add these bits to an existing watch's mask instead of replacing it.
        public static let addToMask = Mask(rawValue: 0x2000_0000)
        /// No events for entries after they are unlinked.
        public static let excludeUnlinked = Mask(rawValue: 0x0400_0000)
        /// The event is about a directory.
        public static let isDirectory = Mask(rawValue: 0x4000_0000)
    }

    /// One event read from an inotify descriptor.
    public struct Event: Sendable {
        /// The watch descriptor the event is for (-1 for a queue overflow).
        public var watch: Int32
        /// What happened.
        public var mask: Mask
        /// Pairs the two halves of a rename.
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
    public static func readEvents(
        _ fd: Int32,
        into buffer: UnsafeMutableRawBufferPointer
    ) throws(SystemCallError) -> [Event] {
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

    /// Wakes the thread polling `fd` (an `eventfd` from ``openWakeup()``).
    ///
    /// A counter already at its limit (`EAGAIN`) is a wakeup still pending, so it counts as
    /// woken.
    /// - Throws: ``SystemCallError`` (`write`, `"eventfd"`) when the wakeup cannot be written (a
    ///   closed or wrong descriptor): the polling thread will not wake for it.
    public static func wake(_ fd: Int32) throws(SystemCallError) {
        var one: UInt64 = 1
        while true {
            let written = withUnsafeBytes(of: &one) { write(fd, $0.baseAddress!, 8) }
            if written == 8 { return }
            let code = written < 0 ? errno : EIO
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return }
            throw SystemCallError(systemCall: "write", errno: Errno(rawValue: code), path: "eventfd")
        }
    }

    /// Clears the wakeups pending on `fd`; none pending is fine.
    /// - Throws: ``SystemCallError`` (`read`, `"eventfd"`) when the descriptor cannot be read.
    public static func drainWakeups(_ fd: Int32) throws(SystemCallError) {
        var value: UInt64 = 0
        while true {
            let count = withUnsafeMutableBytes(of: &value) { read(fd, $0.baseAddress!, 8) }
            if count >= 0 { return }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return }
            throw SystemCallError(systemCall: "read", errno: Errno(rawValue: code), path: "eventfd")
        }
    }

    /// Closes a descriptor from ``open()`` or ``openWakeup()``, dropping its watches or pending
    /// wakeups. Never fails: the descriptor is gone whatever `close(2)` says.
    public static func close(_ fd: Int32) {
        // close(2) must not be retried on EINTR on Linux: the descriptor is gone either way.
        _ = Glibc.close(fd)
    }

    /// `poll` on `descriptors` for input, up to `timeoutMilliseconds` (-1 for no limit).
    /// - Returns: which descriptors are readable.
    public static func waitReadable(
        _ descriptors: [Int32],
        timeoutMilliseconds: Int32
    ) throws(SystemCallError) -> [Bool] {
        var fds = descriptors.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while true {
            let result = poll(&fds, nfds_t(fds.count), timeoutMilliseconds)
            if result >= 0 { return fds.map { $0.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 } }
            if errno == EINTR { continue }
            throw SystemCallError(systemCall: "poll", errno: lastErrno, path: nil)
        }
    }
}
