import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension FileSystem {
    /// Copies the regular file at `source` to `destination` without ever leaving a torn
    /// destination: through a temporary file in the destination's directory, `fsync`, `rename`
    /// and an `fsync` of that directory. The source's permission bits are kept.
    public static func copyFile(at source: String, to destination: String) throws(SystemCallError) {
        let input = try retryingInterrupts("open", path: source) { open(source, O_RDONLY | O_CLOEXEC) }
        defer { _ = close(input) }
        var info = stat()
        try retryingInterrupts("fstat", path: source) { fstat(input, &info) }
        var buffer = [UInt8](repeating: 0, count: 128 * 1024)
        try AtomicFile.replace(destination, mode: info.st_mode & 0o7777) {
            (output, temporary) throws(SystemCallError) in
            while true {
                let count = try buffer.withUnsafeMutableBytes { raw in
                    Result { () throws(SystemCallError) in
                        try retryingInterrupts("read", path: source) { read(input, raw.baseAddress!, raw.count) }
                    }
                }.get()
                if count == 0 { return }
                try buffer.withUnsafeBytes { raw in
                    Result { () throws(SystemCallError) in
                        try AtomicFile.writeAll(
                            output,
                            UnsafeRawBufferPointer(rebasing: raw[..<count]),
                            path: temporary
                        )
                    }
                }.get()
            }
        }
    }

    /// Moves an item with `rename(2)` and makes the move durable (`fsync` of both directories).
    ///
    /// - Returns: `false` if source and destination are on different file systems (`EXDEV`), in
    ///   which case nothing was moved.
    public static func moveEntry(at source: String, to destination: String) throws(SystemCallError) -> Bool {
        while Glibc.rename(source, destination) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EXDEV { return false }
            throw renameError(code, source, destination)
        }
        let from = parentPath(of: source)
        let to = parentPath(of: destination)
        try synchronizeDirectory(at: to)
        if from != to { try synchronizeDirectory(at: from) }
        return true
    }
}
