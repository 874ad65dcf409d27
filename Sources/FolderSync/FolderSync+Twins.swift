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

extension FolderSync {
    /// The first number of this store's current numbering run: where its last leap went.
    static let runFromKey = "sync.out/runFrom"
    /// The earlier runs this store numbered since its first leap (JSON, `[[first, last]]`, the
    /// newest ``numberedRunsKept``).
    static let numberedRunsKey = "sync.out/numberedRuns"
    static let numberedRunsKept = 64
    /// Set (to the file's path) when an import found a log of another installation that writes
    /// under this device's id now; removed when the app enables sync again.
    static let deviceIDInUseKey = "sync.deviceIDInUse"

    /// The entries that start a numbering run at `next` (a leap), closing the current one.
    func numberingRunEntries(startingAt next: UInt64) throws -> [String: Data?] {
        let marks = try store.metadataEntries(forKeys: [Self.runFromKey, Self.numberedRunsKey, Self.sequenceKey])
        var entries: [String: Data?] = [Self.runFromKey: .some(Data(String(next).utf8))]
        guard let runFrom = Self.number(marks[Self.runFromKey]),
            let sequence = Self.number(marks[Self.sequenceKey]), runFrom <= sequence
        else { return entries }
        var runs = Self.numberedRuns(marks[Self.numberedRunsKey])
        runs.append(runFrom...sequence)
        entries[Self.numberedRunsKey] = .some(
            try JSONEncoder().encode(runs.suffix(Self.numberedRunsKept).map { [$0.lowerBound, $0.upperBound] })
        )
        return entries
    }

    static func numberedRuns(_ data: Data?) -> [ClosedRange<UInt64>] {
        let pairs = data.flatMap { try? JSONDecoder().decode([[UInt64]].self, from: $0) } ?? []
        return pairs.compactMap { $0.count == 2 && $0[0] <= $0[1] ? $0[0]...$0[1] : nil }
    }

    /// A log of this device's id read from the container that leapt past an own log (its
    /// writer's numbering leapt after it), with changes of its own.
    struct OwnLogFollowing {
        var url: URL
        var sequence: UInt64
        var follows: UInt64
    }

    /// The number this store was to number next when a log first looked like another
    /// installation's (see ``noteAnotherInstallation(in:_:)``).
    static let suspectFromKey = "sync.out/suspectFrom"

    /// Looks at `logs` for one that another installation under this device's id wrote now, and
    /// returns its file when it finds one: the import's `context` then marks the store, and every
    /// process of this device stops for it (``refuseAnotherInstallation()``). The first log that
    /// leapt past a log of this store (``logOfAnotherInstallation(in:)``) is only a suspect: a
    /// store restored from a backup that another life of the id had already run after can meet
    /// such a log of that life. A log that leapt past a run this store started after that is not:
    /// no earlier life can have read it, while a live installation leaps past it at its next turn.
    func noteAnotherInstallation(in logs: [OwnLogFollowing], _ context: ObjectContext) throws -> URL? {
        guard !logs.isEmpty else { return nil }
        let marks = try store.metadataEntries(forKeys: [Self.suspectFromKey, Self.sequenceKey])
        if let suspect = Self.number(marks[Self.suspectFromKey]) {
            guard let found = try logOfAnotherInstallation(in: logs, following: suspect) else { return nil }
            context.setMetadata(Data(found.url.path.utf8), forKey: Self.deviceIDInUseKey, in: store)
            return found.url
        }
        guard let first = try logOfAnotherInstallation(in: logs) else { return nil }
        // (What this store numbers from now on is past anything an earlier life read.)
        let next = (Self.number(marks[Self.sequenceKey]) ?? 0) + 1
        context.setMetadata(Data(String(next).utf8), forKey: Self.suspectFromKey, in: store)
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
        let leaps = logs.filter { $0.sequence > $0.follows + Self.restoreLeap && $0.follows >= following }
        guard !leaps.isEmpty else { return nil }
        let marks = try store.metadataEntries(forKeys: [Self.runFromKey, Self.numberedRunsKey, Self.sequenceKey])
        guard let runFrom = Self.number(marks[Self.runFromKey]), let sequence = Self.number(marks[Self.sequenceKey])
        else { return nil }
        var runs = Self.numberedRuns(marks[Self.numberedRunsKey])
        if runFrom <= sequence { runs.append(runFrom...sequence) }
        let candidates = leaps.filter { log in runs.contains { $0.contains(log.follows) } }
        guard !candidates.isEmpty else { return nil }
        let kept = try store.metadataEntries(
            forKeys: candidates.flatMap { [Self.outboxKey($0.follows), Self.outboxKey($0.sequence)] }
        )
        for log in candidates {
            guard let ours = kept[Self.outboxKey(log.follows)],
                Data(contentsOf: URL(fileURLWithPath: ownLogPath(log.follows)), atMost: LogFile.maximumEncodedSize)
                    == ours,
                let bytes = Data(contentsOf: log.url, atMost: LogFile.maximumEncodedSize),
                kept[Self.outboxKey(log.sequence)] != bytes
            else { continue }
            return (log.url, log.follows)
        }
        return nil
    }

    /// Before an export or an import, and after an import: when an import (in any process of this
    /// device) found another installation writing under this device's id (see
    /// ``logOfAnotherInstallation(in:)``), sync stops, as after a reset
    /// (``ContainerResetReason/deviceIDInUse``), says so once, and ``SyncError/Code/invalidState``
    /// is thrown. Enabling sync again goes on (the other installation is found again when it
    /// leaps past this one's logs again).
    func refuseAnotherInstallation() throws {
        guard state == .syncing else { return }
        let marks = try store.metadataEntries(forKeys: [Self.deviceIDInUseKey, Self.deviceKey])
        if Self.isAnotherDevice(marks[Self.deviceKey], than: deviceID) {
            logger.warning(
                "the store was given another device id: sync under this one stopped",
                metadata: ["concord.device": "\(deviceID)", "concord.store": "\(store.url.path)"]
            )
            _ = stop(after: .deviceIDChanged)
            throw Self.deviceIDChangedError(marks[Self.deviceKey], from: deviceID, store: store.url)
        }
        guard let path = marks[Self.deviceIDInUseKey].map({ String(decoding: $0, as: UTF8.self) }) else { return }
        logger.warning(
            "another installation writes under this device's id (a copied store or a cloned machine): sync stopped, local data kept",
            metadata: ["concord.device": "\(deviceID)", "concord.file": "\(path)"]
        )
        _ = stop(after: .deviceIDInUse)
        throw SyncError(
            .invalidState,
            "another installation writes under this device's id (\((path as NSString).lastPathComponent) leapt past a log this store wrote): sync stopped",
            url: URL(fileURLWithPath: path)
        )
    }

    /// Removes the mark ``refuseAnotherInstallation()`` stops for: the app enables sync again.
    func clearAnotherInstallation() throws {
        guard try !store.metadataEntries(forKeys: [Self.deviceIDInUseKey]).isEmpty else { return }
        try store.commit(StoreChanges(metadataEntries: [Self.deviceIDInUseKey: Data?.none]))
    }
}
