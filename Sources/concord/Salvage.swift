import FolderSync
import Foundation
import Persistence

/// What a salvage copied and what it could not read.
struct SalvageReport: Codable {
    /// Records of one entity, or a stretch of them, that could not be read.
    struct Skipped: Codable, Hashable {
        var entity: String
        /// The record, when the damage names one (an archive's record that does not decode).
        var id: String?
        /// The last record read before the damage, and the first after it (ids), when a stretch
        /// of an SQLite table could not be read.
        var after: String?
        var before: String?
        var reason: String
    }

    var source: String
    var destination: String
    var sourceType: String
    var destinationType: String
    /// How the records were read: `store` (through the plugin, seeking past damage) or
    /// `document` (an archive's records one by one).
    var method: String = "store"
    /// Records copied, per entity.
    var recovered: [String: Int] = [:]
    /// Records the source said it held, per entity, where it could count them.
    var expected: [String: Int] = [:]
    var skipped: [Skipped] = []
    /// Records copied with a reference left out: one the source held but that could not be read
    /// as record ids (a damaged row; the plugin reads it as no reference).
    var altered: [SQLiteFile.UnreadableReference] = []
    /// References among the copied records to records that were not copied (lost to the damage,
    /// or, in a store that syncs, not arrived yet), kept as they were: at most 100 listed.
    var danglingReferences: [String] = []
    /// How many references `danglingReferences` stands for.
    var danglingCount = 0
    /// Whether the source synced (`sync.device` in its metadata): its missing targets may come
    /// back when the salvaged store rejoins, so they do not make the salvage incomplete.
    var sourceSyncs = false
    /// Metadata entries copied, and those left out on purpose (with why).
    var metadataCopied = 0
    var metadataLeftOut = 0
    var notes: [String] = []
    /// Why the salvage could not start or could not write the new store (then nothing was
    /// salvaged).
    var error: String?

    /// Every record was read and copied as it was, and nothing copied refers to a record that
    /// was lost.
    var isComplete: Bool {
        error == nil && skipped.isEmpty && altered.isEmpty && (danglingCount == 0 || sourceSyncs)
            && expected.allSatisfy { recovered[$0.key, default: 0] >= $0.value }
    }
}

/// Copies every readable record of a damaged store into a new store.
///
/// Records are read through the store's own plugin where it opens the damaged copy (an SQLite
/// database whose damaged pages are past its catalogue): each entity is read in id order, and
/// where a read fails the tool seeks past the damage (a binary search over the id space for the
/// first id it can read from), so only the records on damaged pages are lost, and the stretch is
/// reported by the ids around it. A whole-file store (JSON, property list) that does not open is
/// read as a document: each record is decoded on its own, and those that do not decode are named.
///
/// Metadata: the app's own entries and the sync device id (`sync.device`) are copied; the rest of
/// sync's bookkeeping (`sync.*`: clocks, applied logs, log numbering, outbox, lifecycle marks) is
/// left out, since it describes records and logs the damage may have lost. The new store then
/// rejoins as a restoring device (its device id has logs in the container that the store does not
/// hold): the container's logs, this device's own included, are imported again and bring back what
/// the damage lost, and the records the container never had (saves not exported yet) are
/// exported. `recordsOnly` copies no metadata at all: the store then joins as a new device would.
enum Salvage {
    static let batchSize = 256

    static func run(
        source: URL,
        type: any PersistentStore.Type,
        schema: Schema,
        to destination: URL,
        as destinationType: any PersistentStore.Type,
        recordsOnly: Bool
    ) throws -> SalvageReport {
        guard !FileManager.default.fileExists(atPath: destination.path) else {
            throw ToolError("the destination exists: salvage writes a new store only", url: destination)
        }
        var report = SalvageReport(
            source: source.path,
            destination: destination.path,
            sourceType: type.storeType,
            destinationType: destinationType.storeType
        )
        let copy = try StoreAccess.copy(source, type: type)
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        var records: [Record] = []
        var entries: [String: Data] = [:]
        do {
            let store: any PersistentStore
            do {
                store = try StoreAccess.open(copy, type: type, schema: schema, integrityCheck: "never")
            } catch let error as PersistenceError
                where type.storeType == "sqlite" && error.message.contains("truncated")
            {
                // Pages lost at the end: padded with empty pages, the rest reads, and reads that reach
                // a lost page fail like reads of a damaged one.
                guard let padded = SQLiteFile.padToHeaderSize(copy) else { throw error }
                report.notes.append("the database is cut short: \(padded) lost pages at its end were read as empty")
                store = try StoreAccess.open(copy, type: type, schema: schema, integrityCheck: "never")
            }
            defer { store.close() }
            entries = (try? store.metadata().entries) ?? [:]
            if entries.isEmpty { report.notes.append("the store's metadata could not be read; none is copied") }
            for entity in schema.entities {
                if let count = try? store.count(for: FetchRequest(entity: entity.name)) {
                    report.expected[entity.name] = count
                }
                let found = readEntity(entity.name, from: store, report: &report)
                report.recovered[entity.name] = found.count
                records += found
            }
        } catch {
            guard let wholeFile = type as? any AnyWholeFileStore.Type else {
                throw ToolError(
                    "the store does not open, even to read it (\(error)); nothing can be salvaged this way",
                    url: source
                )
            }
            report.method = "document"
            report.notes.append("the store does not open (\(error)): its records are read one by one from the document")
            (records, entries) = try Document.salvage(
                copy,
                named: source,
                type: wholeFile,
                schema: schema,
                report: &report
            )
        }
        if report.method == "store" && type.storeType == "sqlite" {
            report.altered = (try? SQLiteFile.unreadableReferences(copy, schema: schema)) ?? []
        }
        report.sourceSyncs = entries[SyncMetadata.device.name] != nil
        var references = ReferenceCheck(schema: schema)
        references.add(records)
        let dangling = references.dangling()
        report.danglingCount = dangling.count
        report.danglingReferences = dangling.prefix(100).map { "\($0.source).\($0.relationship) -> \($0.target)" }
        // Errors name the copy: name the original instead.
        for index in report.skipped.indices {
            report.skipped[index].reason = report.skipped[index].reason.replacingOccurrences(
                of: copy.path,
                with: source.path
            )
        }
        report.notes = report.notes.map { $0.replacingOccurrences(of: copy.path, with: source.path) }
        var kept: [String: Data?] = [:]
        if !recordsOnly {
            for (key, value) in entries {
                if key.hasPrefix(SyncMetadata.namespace) && key != SyncMetadata.device.name {
                    report.metadataLeftOut += 1
                } else {
                    kept[key] = value
                }
            }
            report.metadataCopied = kept.count
        } else {
            report.metadataLeftOut = entries.count
        }
        do {
            try FileManager.default.createDirectory(
                at: destination.deletingLastPathComponent(),
                withIntermediateDirectories: true
            )
            let target = try destinationType.init(
                url: destination,
                schema: schema,
                options: StoreOptions(presentsFiles: false)
            )
            defer { target.close() }
            try target.commit(StoreChanges(inserts: records, metadataEntries: kept))
        } catch {
            throw ToolError("cannot write the salvaged store: \(error)", url: destination)
        }
        return report
    }

    /// Every record of `entity` that can be read, in id order, seeking past damage.
    static func readEntity(_ entity: String, from store: any PersistentStore, report: inout SalvageReport) -> [Record] {
        var records: [Record] = []
        var cursor: ObjectID?
        var attempts = 0
        func fetch(after position: ObjectID?, limit: Int) throws -> [Record] {
            attempts += 1
            return try store.fetch(
                FetchRequest(entity: entity, predicate: position.map { .idAfter($0) } ?? .constant(true), limit: limit)
            )
        }
        while attempts < 100_000 {
            if let batch = try? fetch(after: cursor, limit: batchSize) {
                records += batch
                guard batch.count == batchSize, let last = batch.last else { break }
                cursor = last.id
                continue
            }
            do {
                // One at a time up to the damage.
                guard let next = try fetch(after: cursor, limit: 1).first else { break }
                records.append(next)
                cursor = next.id
            } catch {
                let resume = nextReadable(entity, after: cursor, fetch: { try fetch(after: $0, limit: 1) })
                report.skipped.append(
                    SalvageReport.Skipped(
                        entity: entity,
                        after: cursor.map { "\($0)" },
                        before: resume?.first.map { "\($0)" },
                        reason: "\(error)"
                    )
                )
                guard let (_, position) = resume else { break }
                cursor = position
            }
        }
        return records
    }

    /// The first record readable after the damage that follows `cursor`, with the position a
    /// read from succeeds at: a binary search over the id space (reads that seek into a damaged
    /// page fail, reads that seek past it succeed). `nil`: nothing after the damage can be read.
    static func nextReadable(
        _ entity: String,
        after cursor: ObjectID?,
        fetch: (ObjectID) throws -> [Record]
    ) -> (first: ObjectID?, position: ObjectID)? {
        let start = cursor.map { value(of: $0.uuid) } ?? 0
        // Find a step that gets past the damage, doubling; then narrow down to the boundary.
        var failed = start
        var succeeded: (UInt128, [Record])?
        var step: UInt128 = 1 << 64
        while succeeded == nil {
            let (probe, overflow) = start.addingReportingOverflow(step)
            let position = overflow ? UInt128.max : probe
            if let found = try? fetch(id(entity, position)) {
                succeeded = (position, found)
            } else {
                failed = position
                if overflow || position == .max { return nil }
                step = step << 1 == 0 ? UInt128.max - start : step << 1
            }
        }
        guard var (good, found) = succeeded else { return nil }
        for _ in 0..<128 where good - failed > 1 {
            let middle = failed + (good - failed) / 2
            if let records = try? fetch(id(entity, middle)) {
                (good, found) = (middle, records)
            } else {
                failed = middle
            }
        }
        return (found.first?.id, id(entity, good))
    }

    static func value(of uuid: UUID) -> UInt128 {
        withUnsafeBytes(of: uuid.uuid) { bytes in bytes.reduce(UInt128(0)) { $0 << 8 | UInt128($1) } }
    }

    static func id(_ entity: String, _ value: UInt128) -> ObjectID {
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<16 { bytes[index] = UInt8(truncatingIfNeeded: value >> UInt128(8 * (15 - index))) }
        let uuid = UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                bytes[10],
                bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            )
        )
        return ObjectID(entity: entity, uuid: uuid)
    }
}
