import FileCoordination
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Writes logs into a container, durably and without ever replacing one.
public enum LogWriter {
    /// Writes `log` to ``ContainerLayout/logURL(device:sequence:)`` of its device and sequence.
    ///
    /// The store's and the device's folders are created if needed (the container itself must
    /// exist: a missing container is an unmounted or removed share, not something to recreate).
    /// The bytes go to a temporary file in the device's folder (`.NAME.RANDOM.concord-tmp`, which
    /// ``ContainerLayout/classify(fileName:)`` calls `.temporary`), are `fsync`ed, linked into
    /// place under the log's name, and the folder is `fsync`ed: a crash at any instant leaves
    /// either no log or the whole log, and when this returns the log survives a power cut.
    ///
    /// Logs are immutable. If a file already has the log's name, writing succeeds when it holds
    /// exactly these bytes (a retried export) and throws ``SyncError/Code/logExists`` otherwise.
    ///
    /// - Returns: the log's URL.
    /// - Throws: ``SyncError`` with ``SyncError/Code/invalidLog`` (see ``LogFile/invalidity``),
    ///   ``SyncError/Code/containerUnavailable``, ``SyncError/Code/logExists`` or
    ///   ``SyncError/Code/ioFailed``.
    @discardableResult
    public static func write(_ log: LogFile, layout: ContainerLayout) throws(SyncError) -> URL {
        try write(log, layout: layout, synchronizingFolder: true)
    }

    /// ``write(_:layout:)``; without `synchronizingFolder` the device's folder is not `fsync`ed
    /// (the caller writing a batch does it once, with ``synchronizeFolder(of:layout:)``, before it
    /// counts any of them written).
    @discardableResult
    static func write(_ log: LogFile, layout: ContainerLayout, synchronizingFolder: Bool) throws(SyncError) -> URL {
        let destination = layout.logURL(device: log.device, sequence: log.sequence)
        if let invalidity = log.invalidity {
            throw SyncError(.invalidLog, "cannot write a log with \(invalidity)", url: destination)
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: layout.container.path, isDirectory: &isDirectory),
            isDirectory.boolValue
        else {
            throw SyncError(.containerUnavailable, "the container does not exist", url: layout.container)
        }
        let folder = layout.deviceFolder(log.device)
        // Each folder made here is made durable too: a log whose folder's name is lost is lost.
        for (parent, child) in [
            (layout.container, layout.storeFolder), (layout.storeFolder, layout.devicesFolder),
            (layout.devicesFolder, folder),
        ] {
            try DurableFile.createDirectory(child.path, in: parent.path)
        }
        let bytes = log.encoded()
        if try existingMatches(bytes, at: destination) { return destination }

        let temporary = folder.appendingPathComponent(
            ".\(destination.lastPathComponent).\(UInt32.random(in: .min ... .max))\(ContainerLayout.temporarySuffix)"
        )
        try DurableFile.create(temporary.path, bytes: bytes)
        let placed: Bool
        do {
            placed = try DurableFile.linkWithoutReplacing(temporary.path, to: destination.path)
        } catch {
            DurableFile.remove(temporary.path)
            throw error
        }
        if !placed {
            DurableFile.remove(temporary.path)
            if try existingMatches(bytes, at: destination) { return destination }
            throw SyncError(.logExists, "a different log already has this name", url: destination)
        }
        if synchronizingFolder { try DurableFile.synchronizeDirectory(folder.path) }
        return destination
    }

    /// Makes the names of the logs just written into `device`'s folder durable (`fsync` of the
    /// folder).
    static func synchronizeFolder(of device: String, layout: ContainerLayout) throws(SyncError) {
        try DurableFile.synchronizeDirectory(layout.deviceFolder(device).path)
    }

    /// ``write(_:layout:)``, saying whether it wrote the file: `false` when the log was already
    /// there, byte for byte.
    public static func writeIfAbsent(_ log: LogFile, layout: ContainerLayout) throws(SyncError) -> Bool {
        try writeIfAbsent(log, layout: layout, synchronizingFolder: true)
    }

    static func writeIfAbsent(
        _ log: LogFile,
        layout: ContainerLayout,
        synchronizingFolder: Bool
    ) throws(SyncError) -> Bool {
        let destination = layout.logURL(device: log.device, sequence: log.sequence)
        if try existingMatches(log.encoded(), at: destination) { return false }
        try write(log, layout: layout, synchronizingFolder: synchronizingFolder)
        return true
    }

    /// Replaces whatever file has `log`'s name (a damaged or truncated copy of it) with `log`,
    /// atomically and durably. Only a device's own logs are ever replaced, and only by the bytes
    /// it committed for them: healing, not editing.
    public static func replace(_ log: LogFile, layout: ContainerLayout) throws(SyncError) {
        let destination = layout.logURL(device: log.device, sequence: log.sequence)
        guard FileManager.default.fileExists(atPath: destination.path) else {
            try write(log, layout: layout)
            return
        }
        do {
            try FileCoordinator().replaceContentsOfItem(at: destination, with: log.encoded())
        } catch {
            throw SyncError(.ioFailed, "cannot replace the damaged log", url: destination, underlying: error)
        }
    }

    /// Whether a file is at `url` holding `bytes`; throws ``SyncError/Code/logExists`` if it
    /// holds something else.
    private static func existingMatches(_ bytes: Data, at url: URL) throws(SyncError) -> Bool {
        guard FileManager.default.fileExists(atPath: url.path) else { return false }
        // (Bounded: whatever a sync engine put under the name is read no further than a log can be.)
        guard let existing = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize) else {
            let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue
            if let size, size > LogFile.maximumEncodedSize {
                throw SyncError(.logExists, "a file larger than any log already has this name", url: url)
            }
            throw SyncError(.ioFailed, "cannot read the existing log", url: url)
        }
        guard existing == bytes else {
            throw SyncError(.logExists, "a different log already has this name", url: url)
        }
        return true
    }
}

/// The system calls the writer needs, wrapped once: `EINTR` retried, failures thrown as
/// ``SyncError/Code/ioFailed`` naming the call, the errno and the file.
private enum DurableFile {
    /// Creates `path` (which must not exist) with `bytes`, and `fsync`s it. On failure nothing is
    /// left at `path`.
    static func create(_ path: String, bytes: Data) throws(SyncError) {
        let fd = try retrying("open", path) { open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644) }
        do throws(SyncError) {
            try bytes.withUnsafeBytes { buffer in
                Result { () throws(SyncError) in
                    var offset = 0
                    while offset < buffer.count {
                        offset += try retrying("write", path) {
                            Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                        }
                    }
                }
            }.get()
            _ = try retrying("fsync", path) { fsync(fd) }
        } catch {
            _ = close(fd)
            remove(path)
            throw error
        }
        // close(2) is never retried: on Linux the descriptor is gone even after EINTR.
        if close(fd) != 0, errno != EINTR {
            let error = failure("close", path, errno)
            remove(path)
            throw error
        }
    }

    /// Gives the file at `source` the name `destination` too, unless `destination` exists.
    ///
    /// `link(2)` never replaces. On a file system without hard links it falls back to `rename(2)`
    /// after checking that `destination` is free (only this device writes its folder, so nothing
    /// races it there); the source then no longer exists.
    /// - Returns: whether the file now has the name; `false` if `destination` was taken.
    static func linkWithoutReplacing(_ source: String, to destination: String) throws(SyncError) -> Bool {
        while link(source, destination) != 0 {
            let code = errno
            switch code {
            case EINTR:
                continue
            case EEXIST:
                return false
            case EPERM, EOPNOTSUPP, ENOSYS, EMLINK, EXDEV:
                if access(destination, F_OK) == 0 { return false }
                _ = try retrying("rename", source) { rename(source, destination) }
                return true
            default:
                throw failure("link", destination, code)
            }
        }
        remove(source)
        return true
    }

    /// Creates the directory `path` in `parent` unless it exists, and `fsync`s `parent` if it did.
    static func createDirectory(_ path: String, in parent: String) throws(SyncError) {
        while mkdir(path, 0o755) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EEXIST {
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
                    return
                }
            }
            throw failure("mkdir", path, code)
        }
        try synchronizeDirectory(parent)
    }

    /// `fsync(2)` of a directory, so the names just made in it survive a power cut.
    static func synchronizeDirectory(_ path: String) throws(SyncError) {
        let fd = try retrying("open", path) { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { _ = close(fd) }
        _ = try retrying("fsync", path) { fsync(fd) }
    }

    /// `unlink(2)`, best effort.
    static func remove(_ path: String) {
        _ = unlink(path)
    }

    private static func retrying<R: BinaryInteger>(
        _ call: String,
        _ path: String,
        _ body: () -> R
    ) throws(SyncError) -> R {
        while true {
            let result = body()
            if result >= 0 { return result }
            let code = errno
            if code != EINTR { throw failure(call, path, code) }
        }
    }

    private static func failure(_ call: String, _ path: String, _ code: Int32) -> SyncError {
        SyncError(
            .ioFailed,
            "\(call) failed: \(String(cString: strerror(code))) (errno \(code))",
            url: URL(fileURLWithPath: path),
            underlying: POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        )
    }
}
