import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A handle on a directory that follows it wherever it is renamed: an `O_PATH` descriptor, whose
/// current name the kernel keeps (`/proc/self/fd/<fd>`).
///
/// It answers "where is that directory now?" after a rename that no watched directory reported
/// (a folder several levels above a watched one renamed by any process). It holds no lock and
/// reads nothing; it costs one descriptor.
public final class DirectoryAnchor: Sendable {
    private let fd: Int32

    /// Opens an anchor on the directory at `path`, or returns `nil` if no directory is there.
    public init?(path: String) throws(SystemCallError) {
        // O_PATH is hidden behind _GNU_SOURCE in Glibc's module map (see FileSystem.resolvedDirectory).
        let pathOnly: Int32 = 0o10000000
        var descriptor: Int32
        repeat { descriptor = open(path, pathOnly | O_DIRECTORY | O_CLOEXEC) } while descriptor < 0 && errno == EINTR
        if descriptor < 0 {
            let code = errno
            if code == ENOENT || code == ENOTDIR { return nil }
            throw SystemCallError(systemCall: "open", errno: Errno(rawValue: code), path: path)
        }
        fd = descriptor
    }

    deinit { _ = close(fd) }

    /// The directory's path now, or `nil` if it was deleted (or `/proc` is not mounted).
    public var currentPath: String? {
        let capacity = Int(PATH_MAX) + 1
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: capacity) { buffer -> String? in
            let count = readlink("/proc/self/fd/\(fd)", buffer.baseAddress!, capacity - 1)
            guard count > 0, count < capacity - 1, buffer[0] == CChar(UInt8(ascii: "/")) else { return nil }
            let bytes = UnsafeRawBufferPointer(start: buffer.baseAddress!, count: count).bindMemory(to: UInt8.self)
            if bytes.count >= 10 && bytes.suffix(10).elementsEqual(" (deleted)".utf8) { return nil }
            return String(decoding: bytes, as: UTF8.self)
        }
    }
}
