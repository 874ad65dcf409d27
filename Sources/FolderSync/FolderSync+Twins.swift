import Foundation
import Persistence

// Two live installations under one device id: a store copied to a second machine, a cloned
// virtual machine, two machines given the same device name. Each meets the other's logs as
// history of its id that it had not numbered: it leaps past them and sends its writes again, and
// the other does the same when those arrive, without end. An earlier life of the id (a store
// lost, or restored from a backup) leaves the same kind of history, but it ended before this
// store numbered anything after its own leap: no log of it can follow one of those. A log of
// this device's id that follows such a log of this store was written by an installation that
// read it, and writes now: sync stops, as after a reset, and says why.

extension FolderSync {
    /// The first number this store numbered after its numbering first leapt past history of its
    /// id: no earlier life of the id, which ended before, can have read a log from there on.
    static let runFromKey = "sync.out/runFrom"

    /// A log of this device's id read from the container, with the own log it follows (its
    /// writer's numbering leapt past that one).
    struct OwnLogFollowing {
        var url: URL
        var sequence: UInt64
        var follows: UInt64
    }

    /// The file of the first log of `logs` that another installation under this device's id wrote
    /// after reading a log this store numbered since its first leap (`nil` for none): it follows a
    /// number from ``runFromKey`` through the last this store numbered, whose file is, byte for
    /// byte, the log this store's outbox keeps under it; and it is not a log of this store.
    func logOfAnotherInstallation(in logs: [OwnLogFollowing]) throws -> URL? {
        guard !logs.isEmpty else { return nil }
        let marks = try store.metadataEntries(forKeys: [Self.runFromKey, Self.sequenceKey])
        guard let runFrom = Self.number(marks[Self.runFromKey]), let sequence = Self.number(marks[Self.sequenceKey])
        else { return nil }
        let candidates = logs.filter { (runFrom...max(runFrom, sequence)).contains($0.follows) && runFrom <= sequence }
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
            return log.url
        }
        return nil
    }

    /// After an import that found a log of another installation writing under this device's id
    /// now (see ``logOfAnotherInstallation(in:)``): sync stops, as after a reset
    /// (``ContainerResetReason/deviceIDInUse``), says so once, and
    /// ``SyncError/Code/invalidState`` is thrown. (Under the sync lock, a join's import, it waits
    /// for the next import.)
    func stopIfAnotherInstallationWrites() throws {
        guard !syncLock.isHeldByCurrentThread, state == .syncing,
            let url = healing.withLock({ state in
                defer { state.anotherInstallation = nil }
                return state.anotherInstallation
            })
        else { return }
        logger.warning(
            "another installation writes under this device's id (a copied store or a cloned machine): sync stopped, local data kept; give one of them another device id",
            metadata: ["concord.device": "\(deviceID)", "concord.file": "\(url.path)"]
        )
        _ = stop(after: .deviceIDInUse)
        throw SyncError(
            .invalidState,
            "another installation writes under this device's id (\(url.lastPathComponent) follows a log this store wrote): sync stopped; give one of them another device id",
            url: url
        )
    }
}
