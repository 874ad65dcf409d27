import ConcordSystem
import FileCoordination
import Foundation

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
        guard SyncFiles.isFolder(layout.container) else {
            throw SyncError(.containerUnavailable, "the container does not exist", url: layout.container)
        }
        let folder = layout.deviceFolder(log.device)
        // Each folder made here is made durable too: a log whose folder's name is lost is lost.
        for child in [layout.storeFolder, layout.devicesFolder, folder] {
            try system { () throws(SystemCallError) in try FileSystem.createDirectoryDurably(at: child.path) }
        }
        let bytes = log.encoded()
        if try existingMatches(bytes, at: destination) { return destination }
        // (The temporary name, `.NAME.RANDOM.concord-tmp`, is what ContainerLayout calls temporary.)
        let placed = try system { () throws(SystemCallError) in
            try bytes.withUnsafeBytes { buffer in
                Result { () throws(SystemCallError) in
                    try AtomicFile.create(buffer, at: destination.path, synchronizingDirectory: synchronizingFolder)
                }
            }.get()
        }
        if !placed {
            if try existingMatches(bytes, at: destination) { return destination }
            throw SyncError(.logExists, "a different log already has this name", url: destination)
        }
        return destination
    }

    /// Runs file-system calls, their failure thrown as ``SyncError/Code/ioFailed`` naming the
    /// call, the errno and the file.
    private static func system<T>(_ body: () throws(SystemCallError) -> T) throws(SyncError) -> T {
        do {
            return try body()
        } catch {
            let url = URL(fileURLWithPath: error.path ?? "/")
            throw SyncError(
                .ioFailed,
                "\(error.systemCall) failed: \(error.errno) (errno \(error.errno.rawValue))",
                url: url,
                underlying: error
            )
        }
    }

    /// Makes the names of the logs just written into `device`'s folder durable (`fsync` of the
    /// folder).
    static func synchronizeFolder(of device: String, layout: ContainerLayout) throws(SyncError) {
        let folder = layout.deviceFolder(device).path
        try system { () throws(SystemCallError) in try FileSystem.synchronizeDirectory(at: folder) }
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
        guard SyncFiles.exists(destination) else {
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
        guard SyncFiles.exists(url) else { return false }
        // (Bounded: whatever a sync engine put under the name is read no further than a log can be.)
        guard let existing = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize) else {
            let size = SyncFiles.item(at: url).map { Int($0.size) }
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
