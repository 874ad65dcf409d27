import Foundation
import Persistence

// The logs a store wrote under a device id it no longer has (``FolderSync/assignNewDeviceID(_:to:)``).
// The others may still need one of them: a copy lost or damaged after the store took its new id
// (an engine carrying a deletion late, a disk fault) holds back every later log of that id on a
// device that had not applied it. Nobody writes under the old id any more, so the store that
// retired it keeps the logs it wrote into the container and answers the others' requests for
// them, as it did for its own, until every device that holds back compaction has applied them.

/// The logs this store wrote under a device id it retired, answered for still.
struct RetiredLogs: SyncPart {
    let context: SyncContext
    let identities: ContainerIdentities
    let acknowledger: Acknowledger

    /// Publishes `log` (of a device id this store retired) again when the container's copy is
    /// missing or damaged; a valid log of that id under its name stays, whoever wrote it. Returns
    /// whether it wrote the file.
    func republish(_ log: LogFile) throws -> Bool {
        let url = layout.logURL(device: log.device, sequence: log.sequence)
        if let existing = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize),
            let valid = try? LogFile.decode(existing, url: url), valid.device == log.device,
            valid.sequence == log.sequence
        {
            return false
        }
        try LogWriter.replace(log, layout: layout)
        logger.notice(
            "published a lost or damaged log of this store's former device id again",
            metadata: ["concord.file": "\(url.path)", "concord.device": "\(log.device)"]
        )
        emit(.republished(url))
        return true
    }

    /// Answers requests (`wanted`, by device id) for logs of ids this store retired: each kept
    /// one that belongs to this container and is missing or damaged there is published again.
    func answerRequests(_ wanted: [String: Set<UInt64>]) throws {
        let keys = wanted.filter { $0.key != deviceID && ContainerLayout.isValidDeviceID($0.key) }
            .flatMap { device, numbers in numbers.map { SyncMetadata.retiredOutboxLog(device, $0) } }
        guard !keys.isEmpty else { return }
        let kept = try store.syncMetadata(keys).entries
        guard !kept.isEmpty else { return }
        let current = identities.containerIDs().subtracting(identities.replacedContainers())
        for (key, bytes) in kept.sorted(by: { $0.key < $1.key }) {
            guard let (device, sequence) = SyncMetadata.retiredLog(named: key),
                let log = try? LogFile.decode(bytes, url: layout.logURL(device: device, sequence: sequence)),
                log.device == device, log.sequence == sequence,
                log.container.map(current.contains) ?? true
            else { continue }
            _ = try republish(log)
        }
    }

    /// Releases the kept logs of retired ids that every device holding back compaction has
    /// applied (its acknowledgement says so): nobody will ask for them again. The caller holds
    /// the sync lock.
    func release() throws {
        var kept: [(device: String, sequence: UInt64)] = []
        try store.enumerateSyncMetadata(in: SyncMetadata.retiredOutbox, batchSize: 256) { entries in
            kept.append(contentsOf: entries.compactMap { SyncMetadata.retiredLog(named: $0.name) })
        }
        guard !kept.isEmpty else { return }
        let acknowledgements = Dictionary(
            acknowledger.acknowledgements().map { ($0.device, $0) },
            uniquingKeysWith: { $1 }
        )
        let holding = try acknowledger.devicesHoldingBack().filter { $0 != deviceID }
        var released = SyncMetadataChanges()
        for (device, sequence) in kept
        where holding.allSatisfy({ (acknowledgements[$0]?.applied[device] ?? 0) >= sequence }) {
            released.remove(SyncMetadata.retiredOutboxLog(device, sequence))
        }
        guard !released.isEmpty else { return }
        try store.commit(StoreChanges(syncMetadata: released))
    }
}
