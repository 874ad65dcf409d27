import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What kind of item a path names, from `lstat(2)`.
public enum FileKind: Sendable, Hashable {
    /// A regular file.
    case regular
    /// A directory.
    case directory
    /// A symbolic link (not followed).
    case symbolicLink
    /// Anything else: a socket, a FIFO, a device.
    case other
}

/// The part of `lstat(2)` Concord needs to tell whether an item appeared, changed or vanished.
public struct FileIdentity: Sendable, Hashable {
    /// What kind of item it is.
    public var kind: FileKind
    /// The device the item lives on (`st_dev`).
    public var device: UInt64
    /// The item's inode number (`st_ino`); with ``device`` it names the item whatever its path.
    public var inode: UInt64
    /// The size in bytes (`st_size`).
    public var size: Int64
    /// The last modification time, whole seconds since the epoch.
    public var modificationSeconds: Int
    /// The nanoseconds part of the last modification time.
    public var modificationNanoseconds: Int
}

/// Small file-system calls, wrapped once, each throwing a ``SystemCallError`` that names the path.
public enum FileSystem {
    /// `lstat(2)`: the identity of the item at `path`, or `nil` if nothing is there. With
    /// `followingLinks`, `stat(2)`: the identity of the item a symbolic link leads to (`nil` when
    /// it leads nowhere), as `FileManager.fileExists(atPath:)` sees it.
    public static func identity(at path: String, followingLinks: Bool = false) throws(SystemCallError) -> FileIdentity?
    {
        guard let info = try status(at: path, followingLinks: followingLinks) else { return nil }
        return FileIdentity(
            kind: kind(of: info),
            device: UInt64(info.st_dev),
            inode: UInt64(info.st_ino),
            size: Int64(info.st_size),
            modificationSeconds: Int(info.st_mtim.tv_sec),
            modificationNanoseconds: Int(info.st_mtim.tv_nsec)
        )
    }

    /// `lstat(2)`: who owns the item at `path` (`st_uid`) and what kind of item it is, or `nil` if
    /// nothing is there. A symbolic link is not followed: its own owner is reported.
    public static func ownership(at path: String) throws(SystemCallError) -> (owner: UInt32, kind: FileKind)? {
        guard let info = try status(at: path) else { return nil }
        return (UInt32(info.st_uid), kind(of: info))
    }

    /// `lstat(2)` (`stat(2)` when `followingLinks`), retried on `EINTR`; `nil` when nothing is at
    /// `path` (`ENOENT`, `ENOTDIR`).
    private static func status(at path: String, followingLinks: Bool = false) throws(SystemCallError) -> stat? {
        var info = stat()
        while (followingLinks ? stat(path, &info) : lstat(path, &info)) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == ENOENT || code == ENOTDIR { return nil }
            throw SystemCallError(
                systemCall: followingLinks ? "stat" : "lstat",
                errno: Errno(rawValue: code),
                path: path
            )
        }
        return info
    }

    /// The names in the directory at `path` (`opendir(3)`, `readdir(3)`), without `.` and `..`,
    /// in the order the file system gives them.
    ///
    /// - Throws: ``SystemCallError`` for `opendir` (`ENOENT` when nothing is there, `ENOTDIR` for
    ///   a file, `EACCES`, ...) or `readdir`, naming `path`.
    public static func directoryEntries(at path: String) throws(SystemCallError) -> [String] {
        var opened: OpaquePointer?
        while true {
            opened = opendir(path)
            if opened != nil { break }
            let code = errno
            if code == EINTR { continue }
            throw SystemCallError(systemCall: "opendir", errno: Errno(rawValue: code), path: path)
        }
        guard let stream = opened else { return [] }
        defer { closedir(stream) }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(stream) else {
                let code = errno
                if code != 0 { throw SystemCallError(systemCall: "readdir", errno: Errno(rawValue: code), path: path) }
                return names
            }
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
    }

    /// The kind of item an `lstat(2)` result describes.
    private static func kind(of info: stat) -> FileKind {
        switch info.st_mode & S_IFMT {
        case S_IFREG: .regular
        case S_IFDIR: .directory
        case S_IFLNK: .symbolicLink
        default: .other
        }
    }

    /// `realpath(3)`: the absolute path with every symbolic link and `.`/`..` resolved.
    /// - Returns: `nil` if some component does not exist.
    public static func resolvedPath(_ path: String) throws(SystemCallError) -> String? {
        var result: UnsafeMutablePointer<CChar>?
        repeat { result = realpath(path, nil) } while result == nil && errno == EINTR
        guard let resolved = result else {
            let code = errno
            if code == ENOENT || code == ENOTDIR { return nil }
            throw SystemCallError(systemCall: "realpath", errno: Errno(rawValue: code), path: path)
        }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The canonical path of the directory at `path` (every symbolic link resolved), or `nil` if
    /// it does not exist. Costs three system calls whatever the depth (the kernel's own name for
    /// an `O_PATH` descriptor), where `realpath(3)` makes one per component.
    public static func resolvedDirectory(_ path: String) throws(SystemCallError) -> String? {
        try path.withCString { pointer in
            Result { () throws(SystemCallError) in
                try resolvedDirectory(pointer) { $0.map { String(decoding: $0, as: UTF8.self) } }
            }
        }.get()
    }

    /// Like ``resolvedDirectory(_:)-(String)``, handing `body` the resolved path's bytes (`nil` if the
    /// directory does not exist) without building a string.
    public static func resolvedDirectory<R>(
        _ path: UnsafePointer<CChar>,
        _ body: (UnsafeBufferPointer<UInt8>?) -> R
    ) throws(SystemCallError) -> R {
        // O_PATH is hidden behind _GNU_SOURCE in Glibc's module map; its value is the same on
        // every architecture Swift supports on Linux.
        let pathOnly: Int32 = 0o10000000
        var fd: Int32
        repeat { fd = open(path, pathOnly | O_DIRECTORY | O_CLOEXEC) } while fd < 0 && errno == EINTR
        if fd < 0 {
            let code = errno
            if code == ENOENT || code == ENOTDIR { return body(nil) }
            throw SystemCallError(systemCall: "open", errno: Errno(rawValue: code), path: String(cString: path))
        }
        defer { _ = close(fd) }
        let capacity = Int(PATH_MAX) + 1
        let outcome: R? = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity + 32) { buffer in
            // "/proc/self/fd/<fd>", spelled into the tail of the buffer.
            let link = UnsafeMutableBufferPointer(rebasing: buffer[capacity...])
            var cursor = 0
            for byte in "/proc/self/fd/".utf8 {
                link[cursor] = byte
                cursor += 1
            }
            var digits: [UInt8] = []
            var value = Int(fd)
            repeat {
                digits.append(UInt8(ascii: "0") + UInt8(value % 10))
                value /= 10
            } while value > 0
            for digit in digits.reversed() {
                link[cursor] = digit
                cursor += 1
            }
            link[cursor] = 0
            var count: Int
            repeat {
                count = readlink(
                    UnsafeRawPointer(link.baseAddress!).assumingMemoryBound(to: CChar.self),
                    UnsafeMutableRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self),
                    capacity - 1
                )
            } while count < 0 && errno == EINTR
            guard count > 0, count < capacity - 1, buffer[0] == UInt8(ascii: "/") else { return nil }
            let resolved = UnsafeBufferPointer(rebasing: buffer[..<count])
            if resolved.count >= 10 && resolved.suffix(10).elementsEqual(" (deleted)".utf8) { return nil }
            return body(resolved)
        }
        if let outcome { return outcome }
        // No /proc, or a directory deleted meanwhile: the portable way.
        guard let resolved = try resolvedPath(String(cString: path)) else { return body(nil) }
        return resolved.utf8.withContiguousStorageIfAvailable { body($0) }
            ?? body(Array(resolved.utf8).withUnsafeBufferPointer { $0 })
    }

    /// Creates a directory and any missing parents with `mode`; an existing directory is fine,
    /// and so is a symbolic link to one (a shared folder linked from elsewhere, say).
    public static func createDirectory(at path: String, mode: mode_t = 0o755) throws(SystemCallError) {
        if let existing = try identity(at: path, followingLinks: true) {
            if existing.kind == .directory { return }
            throw SystemCallError(systemCall: "mkdir", errno: .fileExists, path: path)
        }
        let parent = FilePath(path).removingLastComponent().string
        if !parent.isEmpty, parent != path { try createDirectory(at: parent, mode: mode) }
        while mkdir(path, mode) != 0 {
            let code = errno
            if code == EINTR { continue }
            // (Made meanwhile by another process; anything else there, a link leading nowhere
            // say, is not a directory.)
            if code == EEXIST, try identity(at: path, followingLinks: true)?.kind == .directory { return }
            throw SystemCallError(systemCall: "mkdir", errno: Errno(rawValue: code), path: path)
        }
    }

    /// Creates the directory `path` unless it exists (its parent must), and `fsync`s the parent
    /// when it made it: a directory whose name a power cut loses loses everything in it.
    public static func createDirectoryDurably(at path: String, mode: mode_t = 0o755) throws(SystemCallError) {
        while mkdir(path, mode) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EEXIST, try identity(at: path)?.kind == .directory { return }
            throw SystemCallError(systemCall: "mkdir", errno: Errno(rawValue: code), path: path)
        }
        try synchronizeDirectory(at: parentPath(of: path))
    }

    /// `fsync(2)` of a directory, so a `rename` or `unlink` inside it survives a power cut.
    public static func synchronizeDirectory(at path: String) throws(SystemCallError) {
        let fd = try retryingInterrupts("open", path: path) { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { _ = close(fd) }
        try retryingInterrupts("fsync", path: path) { fsync(fd) }
    }

    /// `rename(2)`.
    ///
    /// A failure names the path that caused it: the destination when the source exists but the
    /// destination's folder is missing (or not a folder), or when the destination is what the
    /// kernel refused (a non-empty directory, a directory over a file); the source otherwise.
    public static func rename(_ source: String, to destination: String) throws(SystemCallError) {
        while Glibc.rename(source, destination) != 0 {
            let code = errno
            if code == EINTR { continue }
            throw renameError(code, source, destination)
        }
    }

    /// The error for a failed `rename(2)`, naming whichever of the two paths is at fault.
    static func renameError(_ code: Int32, _ source: String, _ destination: String) -> SystemCallError {
        let blamesDestination: Bool
        switch code {
        case ENOENT, ENOTDIR:
            // Either side may be missing: it is the destination's if the source is there.
            blamesDestination = ((try? identity(at: source)) ?? nil) != nil
        case ENOTEMPTY, EEXIST, EISDIR:
            blamesDestination = true
        default:
            blamesDestination = false
        }
        return SystemCallError(
            systemCall: "rename",
            errno: Errno(rawValue: code),
            path: blamesDestination ? destination : source
        )
    }

    /// `unlink(2)` of a file, or `rmdir(2)` of an empty directory. A missing item is fine.
    public static func removeEntry(at path: String) throws(SystemCallError) {
        guard let identity = try identity(at: path) else { return }
        if identity.kind == .directory {
            try retryingInterrupts("rmdir", path: path) { rmdir(path) }
        } else {
            try removeFile(at: path)
        }
    }

    /// `unlink(2)` of a file (anything but a directory, which fails with `EISDIR`). A missing file
    /// is fine.
    public static func removeFile(at path: String) throws(SystemCallError) {
        while unlink(path) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == ENOENT { return }
            throw SystemCallError(systemCall: "unlink", errno: Errno(rawValue: code), path: path)
        }
    }

    /// Opens the file at `path` for writing, creating it empty with `mode` if it is missing, and
    /// closes it at once: an existing file is left as it was, content and all. The kernel reports
    /// the file's creation (if it made it) and a close after writing to anyone watching.
    public static func createFile(at path: String, mode: mode_t = 0o600) throws(SystemCallError) {
        let fd = try retryingInterrupts("open", path: path) { open(path, O_WRONLY | O_CREAT | O_CLOEXEC, mode) }
        // close(2) must not be retried on EINTR on Linux: the descriptor is gone either way.
        _ = close(fd)
    }

    /// `fnmatch(3)` with no flags: whether `name` matches the shell pattern `pattern` (`*`, `?`,
    /// `[...]`, a backslash quoting the next character). A wildcard matches a leading `.` and a
    /// `/` like any other character.
    public static func nameMatches(_ name: String, pattern: String) -> Bool {
        fnmatch(pattern, name, 0) == 0
    }

    /// The directory part of `path`.
    public static func parentPath(of path: String) -> String {
        let parent = FilePath(path).removingLastComponent().string
        return parent.isEmpty ? "." : parent
    }
}
