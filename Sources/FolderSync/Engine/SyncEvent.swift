import Foundation

/// What folder sync reports: setup, exports, imports with progress, and problems, as an
/// `AsyncSequence` (``FolderSync/events()``) and as `NotificationCenter` posts
/// (`Notification.Name.concordSyncEvent`).
public enum SyncEvent: Sendable, CustomStringConvertible {
    /// Sync is set up for this device in the container.
    case setUp(device: String, container: URL)
    /// Local saves were written to the container as logs, up to this sequence number.
    case exported(logs: Int, throughSequence: UInt64)
    /// Existing data joining sync (``FolderSync/exportExistingData(batchSize:progress:)``):
    /// records examined so far (exported now, or already in sync), of the store's total.
    case joinProgress(examined: Int, of: Int)
    /// An import of this many logs began.
    case importStarted(logs: Int)
    /// Logs applied so far, of the total.
    case importProgress(applied: Int, of: Int)
    /// An import finished: logs applied, record changes applied.
    case imported(logs: Int, changes: Int)
    /// Files that are still arriving (benign; they are examined again at the next import).
    case waiting(files: Int)
    /// A log that cannot be read; reported once and skipped. Other logs keep flowing.
    case corruptLog(SyncError)
    /// Logs written with a newer schema are kept, not applied: the app must be upgraded.
    case newerSchemaFound(device: String, schemaVersion: Int)
    /// An export or import failed; sync keeps going at the next attempt.
    case failed(String)
    /// Logs of committed saves could not be written into the container now (it is full,
    /// read-only, unmounted, or a file is in the way: the error names it). The saves are kept:
    /// their logs wait in the store's outbox, and the next export writes them. Not a failed save:
    /// nothing needs to be saved again.
    case exportDeferred(SyncError)
    /// Sync's lifecycle state changed (``FolderSync/enable(policy:live:)``, ``FolderSync/pause()``,
    /// ``FolderSync/disable()``, a reset, the container coming and going).
    case stateChanged(SyncState)
    /// Sync was enabled: how this device joined the container.
    case enabled(SyncJoin)
    /// The container was reset while syncing: sync stopped, the local store is intact. Reported
    /// once per reset (also to the delegate and as `Notification.Name.concordSyncContainerReset`).
    case containerReset(ContainerResetReason)
    /// The container cannot be used (missing, not mounted, read-only); sync starts when it can.
    case containerUnavailable(ContainerAvailability)
    /// A sentinel file that cannot be read; reported once per file.
    case corruptSentinel(SyncError)
    /// A file in this device's folder has the name of one of its logs with other bytes
    /// (``SyncError/Code/logExists``, naming the file): two installations may share the device
    /// id, or a store was restored from a backup. The file is left alone and the log is
    /// renumbered after the last one: nothing is lost.
    case logConflict(SyncError)
    /// A log that holds others back (a gap in its device's numbering, or a log another one
    /// depends on) has been missing or damaged for ``FolderSync/missingLogGracePeriod``: it was
    /// asked for, and its device publishes it again when it can. Reported once per process. The
    /// app may give up on it (``FolderSync/skipMissingLog(device:sequence:)``); by default sync
    /// keeps waiting.
    case missingLog(device: String, sequence: UInt64, url: URL)
    /// A log of this device's that was damaged or missing in the container was published again
    /// from the store (healing).
    case republished(URL)

    /// The event in words.
    public var description: String {
        switch self {
        case .setUp(let device, let container): return "set up device \(device) in \(container.path)"
        case .exported(let logs, let sequence): return "exported \(logs) log(s) through #\(sequence)"
        case .joinProgress(let examined, let total): return "joined \(examined)/\(total) existing record(s)"
        case .importStarted(let logs): return "import of \(logs) log(s) started"
        case .importProgress(let applied, let total): return "imported \(applied)/\(total) log(s)"
        case .imported(let logs, let changes): return "imported \(logs) log(s), \(changes) change(s)"
        case .waiting(let files): return "\(files) file(s) still arriving"
        case .corruptLog(let error): return "skipped a corrupt log: \(error)"
        case .newerSchemaFound(let device, let version):
            return "device \(device) writes schema version \(version): upgrade to import it"
        case .failed(let message): return "sync failed: \(message)"
        case .exportDeferred(let error): return "saved; the export waits for the container: \(error)"
        case .stateChanged(let state): return "sync is \(state)"
        case .enabled(let join): return "sync enabled: \(join)"
        case .containerReset(let reason): return "the container was reset (\(reason)): sync stopped, local data kept"
        case .containerUnavailable(let availability): return "the container cannot be used: \(availability)"
        case .corruptSentinel(let error): return "skipped a damaged sentinel file: \(error)"
        case .logConflict(let error): return "a log name is taken by other bytes; the log was renumbered: \(error)"
        case .missingLog(_, _, let url):
            return
                "\(url.lastPathComponent) of \(url.deletingLastPathComponent().lastPathComponent) is missing or damaged and holds later logs back; asked for it"
        case .republished(let url): return "published \(url.lastPathComponent) again"
        }
    }
}

extension Notification.Name {
    /// Posted for every ``SyncEvent``; the object is the ``FolderSync``, `userInfo["event"]` the event.
    public static let concordSyncEvent = Notification.Name("ConcordSyncEvent")
    /// Posted once when a container reset stops sync; the object is the ``FolderSync``,
    /// `userInfo["reason"]` the ``ContainerResetReason``.
    public static let concordSyncContainerReset = Notification.Name("ConcordSyncContainerReset")
    /// Posted when an import keeps two records that two devices created under one id; the object
    /// is the ``FolderSync``, `userInfo["conflict"]` the ``CreationConflict``.
    public static let concordSyncCreationConflict = Notification.Name("ConcordSyncCreationConflict")
}
