import Foundation
import Persistence

// Two live installations under one device id: a store copied to a second machine, a cloned
// virtual machine, two machines given the same device name. Each meets the other's logs as
// history of its id that it had not numbered: it leaps past them and sends its writes again, and
// the other does the same when those arrive, without end. An earlier life of the id (a store
// lost, or restored from a backup) leaves the same kind of history. So a log of this device's id
// that leapt past a log this store numbered (since its first leap) first only makes it suspect:
// a store restored from a backup meets such a log of a life that went on after the backup and
// ended. A log that leaps past what this store numbered after that cannot be an earlier life's:
// it was written by an installation that writes now. Sync stops, as after a reset, on every
// process of this device, until the app enables it again.

extension Importer {
    /// A log of this device's id read from the container that leapt past an own log (its
    /// writer's numbering leapt after it), with changes of its own.
    struct OwnLogFollowing {
        var url: URL
        var sequence: UInt64
        var follows: UInt64
    }

    /// Looks at `logs` for one that another installation under this device's id wrote now, and
    /// returns its file when it finds one: the import's `context` then marks the store, and every
    /// process of this device stops for it (``refuseAnotherInstallation()``). The first log that
    /// leapt past a log of this store (``logOfAnotherInstallation(in:)``) is only a suspect: a
    /// store restored from a backup that another life of the id had already run after can meet
    /// such a log of that life. A log that leapt past a run this store started after that is not:
    /// no earlier life can have read it, while a live installation leaps past it at its next turn.
    func noteAnotherInstallation(in logs: [OwnLogFollowing], _ context: ObjectContext) throws -> URL? {
        guard !logs.isEmpty else { return nil }
        let marks = try store.syncMetadata([SyncMetadata.suspectFrom, SyncMetadata.sequence])
        if let suspect = marks[SyncMetadata.suspectFrom] {
            guard let found = try logOfAnotherInstallation(in: logs, following: suspect) else { return nil }
            try context.setSyncMetadata(SyncMetadata.deviceIDInUse, found.url.path, in: store)
            return found.url
        }
        guard let first = try logOfAnotherInstallation(in: logs) else { return nil }
        // (What this store numbers from now on is past anything an earlier life read.)
        let next = (marks[SyncMetadata.sequence] ?? 0) + 1
        try context.setSyncMetadata(SyncMetadata.suspectFrom, next, in: store)
        logger.info(
            "a log of this device's id leapt past one of its logs: another installation may write under this id",
            metadata: ["concord.device": "\(deviceID)", "concord.file": "\(first.url.path)"]
        )
        return nil
    }

    /// The file of the first log of `logs` that another installation under this device's id wrote
    /// after reading a log this store numbered since its first leap (from `following` on), with
    /// the number it leapt past (`nil` for none): it leapt past a number of those runs whose file
    /// is, byte for byte, the log this store's outbox keeps under it; and it is not a log of this
    /// store.
    func logOfAnotherInstallation(
        in logs: [OwnLogFollowing],
        following: UInt64 = 0
    ) throws -> (url: URL, follows: UInt64)? {
        let leaps = logs.filter { $0.sequence > $0.follows + Numbering.restoreLeap && $0.follows >= following }
        guard !leaps.isEmpty else { return nil }
        let marks = try store.syncMetadata([SyncMetadata.runFrom, SyncMetadata.numberedRuns, SyncMetadata.sequence])
        guard let runFrom = marks[SyncMetadata.runFrom], let sequence = marks[SyncMetadata.sequence]
        else { return nil }
        var runs = Self.numberedRuns(marks[SyncMetadata.numberedRuns])
        if runFrom <= sequence { runs.append(runFrom...sequence) }
        let candidates = leaps.filter { log in runs.contains { $0.contains(log.follows) } }
        guard !candidates.isEmpty else { return nil }
        let kept = try store.syncMetadata(
            candidates.flatMap { [SyncMetadata.outboxLog($0.follows), SyncMetadata.outboxLog($0.sequence)] }
        )
        for log in candidates {
            guard let ours = kept[SyncMetadata.outboxLog(log.follows)],
                Data(
                    contentsOf: URL(fileURLWithPath: outbox.ownLogPath(log.follows)),
                    atMost: LogFile.maximumEncodedSize
                )
                    == ours,
                let bytes = Data(contentsOf: log.url, atMost: LogFile.maximumEncodedSize),
                kept[SyncMetadata.outboxLog(log.sequence)] != bytes
            else { continue }
            return (log.url, log.follows)
        }
        return nil
    }

}
