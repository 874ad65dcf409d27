import ConcordSystem
import Foundation
import Persistence

// A device's own logs that vanished from its folder in the container: a user or a tool deleted
// them, and a sync engine carried the deletion to every machine. Nobody else can publish them
// again, and nobody may even know they are missing: a device's last log leaves no gap, and a log
// that no later log depends on is asked for by nobody.

extension FolderSync {
    /// Publishes again every log this device's outbox keeps that its folder no longer holds,
    /// below the export mark; says whether logs at or after the mark (``exportPending()``'s,
    /// never written or written and lost: the store cannot tell) are missing too. Looked for only
    /// when the folder changed since this process last looked or wrote into it: otherwise one
    /// `stat`.
    @discardableResult
    func republishLostLogs() throws -> Bool {
        guard let stamp = (try? FileSystem.identity(at: ownLogFolderPath)) ?? nil, stamp.kind == .directory,
            exportMemo.withLock({ $0.folderStamp != stamp })
        else { return false }
        // Under the sync lock: compaction removes logs and then releases their outbox entries.
        let pendingMissing = try syncLock.withLock { () -> Bool in
            let marks = try store.metadataEntries(forKeys: [Self.keptFromKey, Self.outboxFromKey, Self.sequenceKey])
            let exported = Self.number(marks[Self.outboxFromKey]) ?? 1
            let sequence = Self.number(marks[Self.sequenceKey]) ?? 0
            // Numbers below the outbox's first entry have nothing to publish (a restored device's
            // compacted history, say): one look at the first key, however long that history.
            guard
                let first = try store.metadataEntries(withPrefix: Self.outboxPrefix, after: nil, limit: 1).first,
                let oldest = UInt64(first.key.dropFirst(Self.outboxPrefix.count))
            else { return false }
            let kept = max(Self.number(marks[Self.keptFromKey]) ?? 1, oldest)
            guard kept <= sequence else { return false }
            let present = Set(try layout.logSequences(device: deviceID))
            let missing = (kept...sequence).filter { !present.contains($0) }
            var pending = false
            for chunk in missing.chunked(500) {
                let entries = try store.metadataEntries(forKeys: chunk.map(Self.outboxKey))
                for number in chunk where entries[Self.outboxKey(number)] != nil {
                    guard number >= exported else {
                        _ = try republish(number)
                        continue
                    }
                    // The export writes it again, even if this process wrote it before.
                    pending = true
                    exportMemo.withLock { _ = $0.written.removeValue(forKey: number) }
                }
            }
            return pending
        }
        rememberOwnFolder()
        return pendingMissing
    }

    /// Notes the state of this device's folder as this process leaves it. A folder changed less
    /// than ``FolderListings/trustAge`` ago is not noted (it is looked at again next time): the
    /// kernel stamps directories from a coarse clock, and a deletion in the same tick as the last
    /// write would leave the stamp as it was.
    func rememberOwnFolder() {
        var stamp = (try? FileSystem.identity(at: ownLogFolderPath)) ?? nil
        if let known = stamp {
            let modified = Double(known.modificationSeconds) + Double(known.modificationNanoseconds) / 1e9
            if Date().timeIntervalSince1970 - modified <= FolderListings.trustAge { stamp = nil }
        }
        exportMemo.withLock { $0.folderStamp = stamp }
    }

    /// Puts this device's own logs that an import applies (a restored store catching up on its
    /// history) into the outbox, as if it had written them: if one is lost or damaged in the
    /// container later, this device publishes it again (nobody else can). The file's own bytes
    /// are kept (a log of an older format encodes differently now), so that the intact copy in
    /// the container is recognised as this very log.
    func keepInOutbox(_ ownLogs: [(log: LogFile, url: URL)], in context: ObjectContext) throws {
        guard !ownLogs.isEmpty else { return }
        let kept = try store.metadataEntries(forKeys: ownLogs.map { Self.outboxKey($0.log.sequence) })
        for (log, url) in ownLogs where kept[Self.outboxKey(log.sequence)] == nil {
            let bytes = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize).flatMap { data in
                let read = try? LogFile.decode(data, url: url)
                return read?.device == log.device && read?.sequence == log.sequence ? data : nil
            }
            context.setMetadata(bytes ?? log.encoded(), forKey: Self.outboxKey(log.sequence), in: store)
        }
    }

    /// Answers requests for logs of this device that neither its store nor the container holds:
    /// numbered before its store was lost and restored (a process committed them, then died
    /// before it wrote them, and the store went with the machine), so that nobody can have them.
    /// Each goes out empty, as the logs a join gives up do, so that the devices waiting for it go
    /// on. A number some device acknowledges having applied, or that a baseline covers, existed
    /// in the container: it is left to arrive (or to catch up from the baseline).
    func publishEmptyInstead(of numbers: [UInt64]) throws {
        guard !numbers.isEmpty else { return }
        try syncLock.withLock {
            let restored =
                Self.number(try store.metadataEntries(forKeys: [Self.restoreThroughKey])[Self.restoreThroughKey]) ?? 0
            var seen = newestBaseline()?.baseline.covers[deviceID] ?? 0
            for acknowledgement in acknowledgements() where acknowledgement.device != deviceID {
                seen = max(seen, acknowledgement.applied[deviceID] ?? 0)
            }
            let present = Set(try layout.logSequences(device: deviceID))
            for number in numbers where number <= restored && number > seen && !present.contains(number) {
                let url = layout.logURL(device: deviceID, sequence: number)
                guard try LogWriter.writeIfAbsent(try emptyLog(number), layout: layout) else { continue }
                logger.warning(
                    "a log this device committed before its store was lost never reached the container; published empty so that the others go on",
                    metadata: ["concord.file": "\(url.path)", "concord.device": "\(deviceID)"]
                )
                emit(.republished(url))
            }
        }
    }
}
