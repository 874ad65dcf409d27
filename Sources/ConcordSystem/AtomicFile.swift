import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Whole-file replacement that never leaves a torn file (invariant 1).
///
/// The new content goes to a temporary file in the same directory, which is `fsync`ed, renamed
/// over the target, and then the directory is `fsync`ed. A crash at any instant leaves either the
/// old content or the new, never a mix; a failure removes the temporary file and leaves the
/// target as it was, except a failed `fsync` of the directory after the rename, which throws an
/// error with ``SystemCallError/contentReplaced`` set: the new content is in place.
public enum AtomicFile {
    /// Replaces the content of the file at `path` with `bytes`, creating it if needed.
    ///
    /// An existing file's permission bits are kept; a new file gets `0644` less the umask.
    public static func write(_ bytes: UnsafeRawBufferPointer, to path: String) throws(SystemCallError) {
        var mode: mode_t = 0o644
        var existing = stat()
        var found: Int32
        repeat { found = stat(path, &existing) } while found != 0 && errno == EINTR
        if found == 0 { mode = existing.st_mode & 0o7777 }
        try replace(path, mode: mode) { (fd, temporary) throws(SystemCallError) in
            try writeAll(fd, bytes, path: temporary)
        }
    }

    /// Replaces the content of the file at `path` with what `produce` writes, chunk by chunk, as
    /// ``write(_:to:)`` does with one buffer: a content too large to hold in memory (a baseline)
    /// never is. An error `produce` throws removes the temporary file, leaves `path` untouched
    /// and is rethrown as it was.
    ///
    /// An existing file's permission bits are kept; a new file gets `0644` less the umask.
    public static func write(
        to path: String,
        producing produce: (_ write: (UnsafeRawBufferPointer) throws -> Void) throws -> Void
    ) throws {
        var mode: mode_t = 0o644
        var existing = stat()
        var found: Int32
        repeat { found = stat(path, &existing) } while found != 0 && errno == EINTR
        if found == 0 { mode = existing.st_mode & 0o7777 }
        // The producer's own failure, kept whole while `replace` cleans up.
        var failure: (any Error)?
        do {
            try replace(path, mode: mode) { (fd, temporary) throws(SystemCallError) in
                do {
                    try produce { bytes in try writeAll(fd, bytes, path: temporary) }
                } catch let error as SystemCallError {
                    throw error
                } catch {
                    failure = error
                    throw SystemCallError(systemCall: "write", errno: .canceled, path: temporary)
                }
            }
        } catch {
            throw failure ?? error
        }
    }

    /// The one way Concord replaces a file: `fill` writes the new content into a temporary file
    /// (created with `mode`) in the same directory, which is then `fsync`ed, renamed over `path`,
    /// and the directory `fsync`ed. On failure the temporary file is removed and `path` untouched.
    static func replace(
        _ path: String,
        mode: mode_t,
        fill: (_ fd: Int32, _ temporary: String) throws(SystemCallError) -> Void
    ) throws(SystemCallError) {
        let directory = FileSystem.parentPath(of: path)
        let name = FilePath(path).lastComponent?.string ?? "item"
        let temporary = "\(directory)/.\(name).\(UInt32.random(in: .min ... .max)).concord-tmp"
        let fd = try retryingInterrupts("open", path: temporary) {
            open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        }
        var renamed = false
        defer {
            if !renamed { while unlink(temporary) != 0 && errno == EINTR {} }
        }
        do throws(SystemCallError) {
            // The umask may have narrowed the mode given to open.
            if mode != 0o644 { try retryingInterrupts("fchmod", path: temporary) { fchmod(fd, mode) } }
            try fill(fd, temporary)
            try retryingInterrupts("fsync", path: temporary) { fsync(fd) }
        } catch {
            _ = close(fd)
            throw error
        }
        // close(2) is never retried: on Linux the descriptor is gone even when it reports EINTR,
        // and a retry could close one that another thread just opened.
        if close(fd) != 0, errno != EINTR {
            throw SystemCallError(systemCall: "close", errno: lastErrno, path: temporary)
        }
        try FileSystem.rename(temporary, to: path)
        renamed = true
        do throws(SystemCallError) {
            try FileSystem.synchronizeDirectory(at: directory)
        } catch {
            // The new content is in place: said so, for callers that must not report a failure.
            var error = error
            error.contentReplaced = true
            throw error
        }
    }

    /// The one way Concord places a file that is never replaced (an immutable log): `bytes` go to
    /// a temporary file in the same directory (`.NAME.RANDOM.concord-tmp`), which is `fsync`ed
    /// and then given the name `path` only if nothing has it (`link(2)` never replaces; on a file
    /// system without hard links, `rename(2)` after checking that the name is free). With
    /// `synchronizingDirectory`, the directory is `fsync`ed too; a caller placing a batch does it
    /// once with ``FileSystem/synchronizeDirectory(at:)``. The temporary file never stays.
    ///
    /// - Returns: whether the file now has the name; `false` when something else already had it.
    public static func create(
        _ bytes: UnsafeRawBufferPointer,
        at path: String,
        synchronizingDirectory: Bool = true
    ) throws(SystemCallError) -> Bool {
        let directory = FileSystem.parentPath(of: path)
        let name = FilePath(path).lastComponent?.string ?? "item"
        let temporary = "\(directory)/.\(name).\(UInt32.random(in: .min ... .max)).concord-tmp"
        let fd = try retryingInterrupts("open", path: temporary) {
            open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        }
        // Whatever happens, the temporary name goes (after a link, the file keeps its new one).
        defer { while unlink(temporary) != 0 && errno == EINTR {} }
        do throws(SystemCallError) {
            try writeAll(fd, bytes, path: temporary)
            try retryingInterrupts("fsync", path: temporary) { fsync(fd) }
        } catch {
            _ = close(fd)
            throw error
        }
        if close(fd) != 0, errno != EINTR {
            throw SystemCallError(systemCall: "close", errno: lastErrno, path: temporary)
        }
        guard try link(temporary, toFreeName: path) else { return false }
        if synchronizingDirectory { try FileSystem.synchronizeDirectory(at: directory) }
        return true
    }

    /// Gives the file at `source` the name `destination` too, unless `destination` is taken.
    private static func link(_ source: String, toFreeName destination: String) throws(SystemCallError) -> Bool {
        while Glibc.link(source, destination) != 0 {
            let code = errno
            switch code {
            case EINTR:
                continue
            case EEXIST:
                return false
            case EPERM, EOPNOTSUPP, ENOSYS, EMLINK, EXDEV:
                // No hard links here. Only one writer places files in the folder (a device writes
                // only its own), so nothing takes the name between the check and the rename.
                if try FileSystem.identity(at: destination) != nil { return false }
                try FileSystem.rename(source, to: destination)
                return true
            default:
                throw SystemCallError(systemCall: "link", errno: Errno(rawValue: code), path: destination)
            }
        }
        return true
    }

    /// Writes all of `bytes` to `fd`, however many `write` calls it takes.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws(SystemCallError) {
        var offset = 0
        while offset < bytes.count {
            offset += try retryingInterrupts("write", path: path) {
                Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            }
        }
    }

    /// Replaces the content of the file at `path` with `bytes`.
    public static func write<Bytes: Sequence<UInt8>>(_ bytes: Bytes, to path: String) throws(SystemCallError) {
        let array = Array(bytes)
        let outcome = array.withUnsafeBytes { buffer in
            Result { () throws(SystemCallError) in try write(buffer, to: path) }
        }
        try outcome.get()
    }

    /// Reads the whole file at `path`.
    public static func read(at path: String) throws(SystemCallError) -> [UInt8] {
        let fd = try retryingInterrupts("open", path: path) { open(path, O_RDONLY | O_CLOEXEC) }
        defer { _ = close(fd) }
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = try chunk.withUnsafeMutableBytes { buffer in
                Result { () throws(SystemCallError) in
                    try retryingInterrupts("read", path: path) { Glibc.read(fd, buffer.baseAddress!, buffer.count) }
                }
            }.get()
            if count == 0 { return result }
            result.append(contentsOf: chunk[0..<count])
        }
    }
}
