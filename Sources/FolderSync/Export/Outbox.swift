import ConcordSystem
import Foundation
import Logging
import Persistence
import Synchronization

// The exporter's side of the store: every local save's log is committed to the outbox with the
// save, under the sync lock, and written into the container afterwards. Outbox entries stay
// after they are written, until compaction knows every device has applied them: a device whose
// log is damaged or lost in the container publishes it again from there (healing).

/// The outbox: every local save's log is committed to it with the save, under the sync lock,
/// and written into the container afterwards (``writePending(holding:deferring:)``). Entries
/// stay after they are written, until compaction knows every device has applied them: a log
/// damaged or lost in the container is published again from here.
final class Outbox: SyncPart, Sendable {
    let context: SyncContext
    /// What this process's exports wrote (and made durable), so that the next save need not
    /// read those logs back from the container to move the export mark past them.
    let memo = Mutex(ExportMemo())

    init(context: SyncContext) { self.context = context }

    /// The first of the numbers `from..<end` whose log may not be in the container as committed
    /// (`end` if all are): written by this process's export (these very bytes, made durable), or
    /// found there byte for byte. Those below `keptFrom` count as written: compaction released
    /// their entries once every device had them (and may have removed their files since). Read
    /// in growing chunks: the first unexported log is usually the first or one of the next few.
    func exportedThrough(from: UInt64, before end: UInt64, keptFrom: UInt64) throws -> UInt64 {
        var next = max(from, min(keptFrom, end))
        var chunk: UInt64 = 4
        let written = next < end ? memo.withLock { $0.written } : [:]
        while next < end {
            let numbers = Array(next..<min(end, next + chunk))
            let kept = try store.syncMetadata(numbers.map(SyncMetadata.outboxLog))
            for number in numbers {
                let path = ownLogPath(number)
                if let data = kept[SyncMetadata.outboxLog(number)] {
                    guard
                        written[number] == ExportMemo.fingerprint(data)
                            || Data(contentsOf: URL(fileURLWithPath: path), atMost: LogFile.maximumEncodedSize) == data
                    else { return next }
                } else if ((try? FileSystem.identity(at: path)) ?? nil) == nil {
                    return next
                }
                next = number + 1
            }
            chunk = min(chunk * 4, 256)
        }
        return next
    }

    /// Moves the export mark past every log in the container as committed (one commit, under the
    /// sync lock): after an export that leaves, the mark then says exactly what was written.
    func advanceExportMark() throws {
        try syncLock.withLock { _ in
            let marks = try store.syncMetadata([SyncMetadata.sequence, SyncMetadata.outboxFrom, SyncMetadata.keptFrom])
            let sequence = marks[SyncMetadata.sequence] ?? 0
            let marked = marks[SyncMetadata.outboxFrom] ?? 1
            guard marked <= sequence else { return }
            let from = try exportedThrough(
                from: marked,
                before: sequence + 1,
                keptFrom: marks[SyncMetadata.keptFrom] ?? 1
            )
            guard from != marked else { return }
            var changes = SyncMetadataChanges()
            try changes.set(SyncMetadata.outboxFrom, from)
            try store.commit(StoreChanges(syncMetadata: changes))
            memo.withLock { memo in memo.written = memo.written.filter { $0.key >= from } }
        }
    }

    /// The path of this device's log `sequence` in the container.
    func ownLogPath(_ sequence: UInt64) -> String {
        ownLogFolderPath + "/" + ContainerLayout.logFileName(sequence: sequence)
    }

    /// The dependencies entry decoded, remembered while it stays the same (most saves between
    /// two imports find the same bytes).
    func decodedDependencies(_ data: Data) -> [String: UInt64] {
        if let known = memo.withLock({ $0.dependencies }), known.data == data { return known.value }
        let value = SyncMetadata.dependencies.decode(data) ?? [:]
        memo.withLock { $0.dependencies = (data, value) }
        return value
    }

    /// How far the export mark may lag behind the logs this process wrote before a save moves it.
    static let exportMarkBatch: UInt64 = 32

    /// Moves the outbox's log `number`, whose name a different file holds, to the next free
    /// number (and writes it there); returns that number.
    private func renumber(_ number: UInt64, holding permit: SyncLock.Permit?) throws -> UInt64 {
        try syncLock.withLock(permit) { _ in
            let entries = try store.syncMetadata(
                [SyncMetadata.outboxLog(number), SyncMetadata.sequence, SyncMetadata.restoreThrough]
            )
            guard let data = entries[SyncMetadata.outboxLog(number)] else { return number }
            var log = try LogFile.decode(data, url: layout.logURL(device: deviceID, sequence: number))
            let highest = ((try? highestOwnLog()) ?? nil) ?? 0
            let stored = entries[SyncMetadata.sequence] ?? 0
            log.sequence = max(stored, highest) + 1
            // (The numbers passed over are that history's, not this store's: a new run starts.)
            var changes = highest > stored ? try numberingRunEntries(startingAt: log.sequence) : SyncMetadataChanges()
            changes.remove(SyncMetadata.outboxLog(number))
            try changes.set(SyncMetadata.outboxLog(log.sequence), log.encoded())
            try changes.set(SyncMetadata.sequence, log.sequence)
            // The log under the name is of this device id and the store does not hold it (a store
            // restored before its old logs arrived): imports apply it.
            try changes.set(SyncMetadata.restoreThrough, max(entries[SyncMetadata.restoreThrough] ?? 0, highest))
            // Logs this store wrote before may have taken names of that history too (an earlier
            // life's, which the others passed over as applied): its writes go out again at the
            // next import.
            try changes.set(SyncMetadata.resendOwnWrites, log.sequence)
            try store.commit(StoreChanges(syncMetadata: changes))
            try LogWriter.write(log, layout: layout)
            return log.sequence
        }
    }

    /// Publishes again this device's log `sequence` from the outbox when the container's copy is
    /// missing or damaged (anything but these exact bytes). Returns whether it wrote the file;
    /// `false` when the copy is intact or the outbox no longer holds the log.
    func republish(_ sequence: UInt64) throws -> Bool {
        guard let data = try store.syncMetadataValue(SyncMetadata.outboxLog(sequence)) else {
            return false
        }
        let url = layout.logURL(device: deviceID, sequence: sequence)
        let existing = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize)
        if existing == data { return false }
        // Healing replaces a damaged or missing copy only: a valid log of this device under the
        // name is what the others may have applied already, and is never overwritten.
        if let existing, let valid = try? LogFile.decode(existing, url: url), valid.device == deviceID,
            valid.sequence == sequence
        {
            logger.error(
                "a valid log with other bytes has this device's log name; it is left alone",
                metadata: ["concord.file": "\(url.path)", "concord.device": "\(deviceID)"]
            )
            return false
        }
        try LogWriter.replace(try LogFile.decode(data, url: url), layout: layout)
        logger.notice(
            "published a damaged or missing log of this device again",
            metadata: ["concord.file": "\(url.path)"]
        )
        emit(.republished(url))
        return true
    }

    /// Releases the outbox entries through `sequence`: compaction removed those logs, which every
    /// device has applied.
    func releaseOutbox(through sequence: UInt64, holding permit: SyncLock.Permit) throws {
        let marks = try store.syncMetadata([SyncMetadata.keptFrom, SyncMetadata.outboxFrom])
        let from = marks[SyncMetadata.keptFrom] ?? 1
        guard from <= sequence else { return }
        var entries = SyncMetadataChanges()
        for number in from...sequence { entries.remove(SyncMetadata.outboxLog(number)) }
        try entries.set(SyncMetadata.keptFrom, sequence + 1)
        // Nothing released is left to write: the export mark moves past it too (a mark left
        // behind made every later save and export look over the released numbers again).
        if (marks[SyncMetadata.outboxFrom] ?? 1) <= sequence {
            try entries.set(SyncMetadata.outboxFrom, sequence + 1)
        }
        try store.commit(StoreChanges(syncMetadata: entries))
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
        memo.withLock { $0.folderStamp = stamp }
    }

    /// Puts this device's own logs that an import applies (a restored store catching up on its
    /// history) into the outbox, as if it had written them: if one is lost or damaged in the
    /// container later, this device publishes it again (nobody else can). The file's own bytes
    /// are kept (a log of an older format encodes differently now), so that the intact copy in
    /// the container is recognised as this very log.
    func keepInOutbox(_ ownLogs: [(log: LogFile, url: URL)], in context: ObjectContext) throws {
        guard !ownLogs.isEmpty else { return }
        let kept = try store.syncMetadata(ownLogs.map { SyncMetadata.outboxLog($0.log.sequence) })
        // (An empty log that stood in for a lost one gives way to the original, turned up.)
        for (log, url) in ownLogs where kept[SyncMetadata.outboxLog(log.sequence)].map(Self.isStandIn) ?? true {
            let bytes = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize).flatMap { data in
                let read = try? LogFile.decode(data, url: url)
                return read?.device == log.device && read?.sequence == log.sequence ? data : nil
            }
            try context.setSyncMetadata(SyncMetadata.outboxLog(log.sequence), bytes ?? log.encoded(), in: store)
        }
    }

    /// Whether this device's log `sequence` in the container was written for one of the
    /// containers `replaced` (its device had not seen the replacement).
    func isWritten(sequence: UInt64, forOneOf replaced: Set<String>) -> Bool {
        guard !replaced.isEmpty else { return false }
        let url = layout.logURL(device: deviceID, sequence: sequence)
        guard let data = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize),
            let container = (try? LogFile.decode(data, url: url))?.container
        else { return false }
        return replaced.contains(container)
    }

    /// Whether `bytes` are a stand-in log (an empty log that depends on its own device's logs before it).
    static func isStandIn(_ bytes: Data) -> Bool {
        guard let log = try? LogFile.decode(bytes, url: URL(fileURLWithPath: "/")) else { return false }
        return ScannedLog(url: URL(fileURLWithPath: "/"), log: log).isStandIn
    }

    /// Writes every outgoing log not yet in the container (see ``FolderSync/exportPending()``);
    /// returns how many it wrote. A failure is handed to `deferring` (after what was written
    /// before it is made durable and reported), then thrown.
    func writePending(holding permit: SyncLock.Permit?, deferring: (SyncError) -> Void) throws -> Int {
        let outgoing = try outgoingLogs(holding: permit)
        var written = 0
        var last: UInt64 = 0
        // The logs of this batch that are in the container as committed, once made durable.
        var inPlace: [UInt64: Int] = [:]
        // The batch's names are made durable together: one `fsync` of the folder, before any of
        // them counts as written (the outbox keeps them until then, and after).
        var unsynchronized = 0
        func synchronize() throws(SyncError) {
            guard unsynchronized > 0 else { return }
            try LogWriter.synchronizeFolder(of: deviceID, layout: layout)
            written += unsynchronized
            unsynchronized = 0
            let durable = inPlace
            memo.withLock { $0.written.merge(durable) { $1 } }
        }
        let alreadyWritten = memo.withLock { $0.written }
        for (number, data) in outgoing {
            // Written and made durable by this process, these very bytes (the mark moves past
            // them in batches). A log deleted since is published again by the look above.
            if let fingerprint = alreadyWritten[number], fingerprint == ExportMemo.fingerprint(data) { continue }
            let target = layout.logURL(device: deviceID, sequence: number)
            let log = try LogFile.decode(data, url: target)
            let outcome = Result { () throws(SyncError) in
                try LogWriter.writeIfAbsent(log, layout: layout, synchronizingFolder: false)
            }
            switch outcome {
            case .success(true):
                unsynchronized += 1
                last = number
                inPlace[number] = ExportMemo.fingerprint(data)
            case .success(false):
                continue
            case .failure(let error) where error.code != .logExists:
                // What was written before the failure is made durable and reported; the rest
                // stays in the outbox for the next export.
                try? synchronize()
                if written > 0 { emit(.exported(logs: written, throughSequence: last)) }
                deferring(error)
                throw error
            case .failure(let error):
                if try settleTakenName(of: number, error, holding: permit) {
                    written += 1
                    last = number
                }
            }
        }
        do {
            try synchronize()
        } catch {
            deferring(error)
            throw error
        }
        if written > 0 {
            rememberOwnFolder()
            logger.debug("exported", metadata: ["concord.device": "\(deviceID)", "concord.logs": "\(written)"])
            emit(.exported(logs: written, throughSequence: last))
        }
        return written
    }
}

extension Outbox {
    /// The logs committed to the outbox and not known to be in the container, read under the sync
    /// lock (which brings this process's view of the store up to date): another process of this
    /// device may have committed them.
    private func outgoingLogs(holding permit: SyncLock.Permit?) throws -> [(UInt64, Data)] {
        try syncLock.withLock(permit) { _ -> [(UInt64, Data)] in
            let marks = try store.syncMetadata([SyncMetadata.sequence, SyncMetadata.outboxFrom, SyncMetadata.keptFrom])
            let sequence = marks[SyncMetadata.sequence] ?? 0
            // (Entries below the kept mark were released: nothing there is left to write.)
            let from = max(marks[SyncMetadata.outboxFrom] ?? 1, marks[SyncMetadata.keptFrom] ?? 1)
            guard from <= sequence else { return [] }
            var found: [(UInt64, Data)] = []
            for chunk in Array(from...sequence).chunked(500) {
                let entries = try store.syncMetadata(chunk.map(SyncMetadata.outboxLog))
                for number in chunk {
                    if let data = entries[SyncMetadata.outboxLog(number)] { found.append((number, data)) }
                }
            }
            return found
        }
    }

    /// Another file has the name of log `number`. A damaged copy of this very log (cut short, or
    /// garbled by a sync engine) is healed: returns true when it was published again. A valid,
    /// different log is a conflict: the log is renumbered (and reported), and false returned.
    private func settleTakenName(of number: UInt64, _ error: SyncError, holding permit: SyncLock.Permit?) throws -> Bool
    {
        let target = layout.logURL(device: deviceID, sequence: number)
        let existing = Data(contentsOf: target, atMost: LogFile.maximumEncodedSize).flatMap {
            try? LogFile.decode($0, url: target)
        }
        guard existing != nil else { return try republish(number) }
        logger.error(
            "a different file already has this device's log name; the log is renumbered",
            metadata: ["concord.file": "\(target.path)", "concord.device": "\(deviceID)"]
        )
        emit(.logConflict(error))
        let renumbered = try renumber(number, holding: permit)
        emit(.exported(logs: 1, throughSequence: renumbered))
        return false
    }
}

/// What one process's exports remember between saves.
struct ExportMemo: Sendable {
    /// Logs this process wrote and made durable, by number: a fingerprint of their bytes.
    var written: [UInt64: Int] = [:]
    /// The last dependencies entry decoded.
    var dependencies: (data: Data, value: [String: UInt64])?
    /// The log number this process made last (`nil`: none yet).
    var lastAllocated: UInt64?
    /// This device's folder in the container as this process last looked at it or left it.
    var folderStamp: FileIdentity?
    /// Whether the last look at that folder found logs at or after the export mark missing.
    var ownLogsMissing = false

    /// A fingerprint of `bytes`, for comparing within this process.
    static func fingerprint(_ bytes: Data) -> Int {
        var hasher = Hasher()
        hasher.combine(bytes.count)
        // Every byte (`Data`'s own hash covers only a prefix).
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        return hasher.finalize()
    }
}
