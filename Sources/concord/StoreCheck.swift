import FolderSync
import Foundation
import Persistence

/// What `concord store check` found.
///
/// The check judges a copy the way SQLite and the store's plugin see the store: an SQLite copy
/// first has its `-wal` replayed (the state a session left open or a kill mid-checkpoint leaves
/// is healthy: the database header may count pages that only the `-wal` holds yet), then
/// `PRAGMA integrity_check` runs (pages, and every index against its table), every record of
/// every entity is read, and every to-one and to-many target must be a record the store holds.
struct StoreCheck: Encodable {
    var path: String
    var type: String
    var opened = false
    var schemaVersion: Int?
    var storeIdentifier: String?
    var syncDevice: String?
    var records: [String: Int] = [:]
    var metadataEntries = 0
    /// SQLite: whether the copy's `-wal` held frames, replayed before the checks.
    var replayedLog = false
    /// SQLite: `PRAGMA integrity_check`'s verdict, `["ok"]` or its first findings.
    var integrity: [String]?
    /// References whose target the store does not hold, or that cannot be read as record ids.
    var danglingReferences = 0
    var problems: [String] = []
    /// Findings that are not damage (what a syncing store may hold until other devices' records
    /// arrive, say).
    var notes: [String] = []
    /// Why the check could not start (then nothing else is filled in).
    var error: String?

    /// The exit status: 0 healthy, 1 damaged but it opens, 2 it does not open.
    var status: Int32 { problems.isEmpty ? 0 : opened ? 1 : 2 }

    /// Checks the store at `path` (a store file, or a data folder holding one). Throws a
    /// ``ToolError`` only when the check cannot start (no such store, an unknown type).
    static func run(path: String, type name: String?, schemaFrom: String?) throws -> StoreCheck {
        let url = try StoreAccess.storeFile(path)
        let type = try StoreAccess.type(of: url, named: name)
        var check = StoreCheck(path: url.path, type: type.storeType)
        let copy = try StoreAccess.copy(url, type: type)
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        func named(_ error: any Error) -> String { "\(error)".replacingOccurrences(of: copy.path, with: url.path) }
        let isSQLite = type.storeType == "sqlite"
        if isSQLite {
            do {
                check.replayedLog = try SQLiteFile.replayLog(copy)
            } catch {
                check.problems.append("the -wal cannot be replayed into the database: \(named(error))")
            }
            if let (pages, bytes) = SQLiteFile.missingPages(copy) {
                check.problems.append(
                    "the database is truncated: its header counts \(pages) pages (\(bytes) bytes) past its end"
                        + (check.replayedLog ? ", with its -wal replayed" : "")
                )
            }
        }
        let schema: Schema
        do {
            schema =
                try schemaFrom == nil
                ? StoreAccess.schema(of: copy, type: type.storeType)
                : StoreAccess.schema(of: url, type: type.storeType, from: schemaFrom)
        } catch {
            check.problems.append(named(error))
            return check
        }
        if isSQLite && check.problems.isEmpty {
            do {
                let verdict = try SQLiteFile.integrityCheck(copy)
                check.integrity = Array(verdict.prefix(20))
                if verdict != ["ok"] {
                    check.problems.append(
                        "the database is damaged, integrity_check: " + verdict.prefix(5).joined(separator: "; ")
                            + (verdict.count > 5 ? "; and \(verdict.count - 5) more" : "")
                    )
                }
            } catch {
                check.problems.append("integrity_check cannot run: \(named(error))")
            }
        }
        let store: any PersistentStore
        do {
            // The integrity check ran above: the plugin's own would stop at the first finding.
            store = try StoreAccess.open(copy, type: type, schema: schema, integrityCheck: isSQLite ? "never" : "quick")
        } catch {
            check.problems.append(named(error))
            return check
        }
        defer { store.close() }
        check.opened = true
        if let metadata = try? store.metadata() {
            check.schemaVersion = metadata.schemaVersion
            check.storeIdentifier = metadata.storeIdentifier.uuidString.lowercased()
            check.metadataEntries = metadata.entries.count
            check.syncDevice = SyncMetadataSnapshot(metadata.entries)[SyncMetadata.device]
        } else {
            check.problems.append("the metadata cannot be read")
        }
        var references = ReferenceCheck(schema: schema)
        for entity in schema.entities {
            var count = 0
            do {
                try store.enumerateRecords(of: entity.name, batchSize: 1000) { batch in
                    count += batch.count
                    references.add(batch)
                }
                let counted = try store.count(for: FetchRequest(entity: entity.name))
                if counted != count {
                    check.problems.append("\(entity.name): \(counted) records counted, \(count) read")
                }
            } catch {
                check.problems.append("\(entity.name): reading stopped after \(count) records: \(named(error))")
            }
            check.records[entity.name] = count
        }
        check.judge(
            references,
            unreadable: isSQLite ? (try? SQLiteFile.unreadableReferences(copy, schema: schema)) : nil
        )
        return check
    }

    /// Adds what the reference check found: unreadable references are damage; references to
    /// records the store does not hold are damage too, unless the store syncs (records another
    /// device made may not have arrived yet).
    private mutating func judge(_ references: ReferenceCheck, unreadable: [SQLiteFile.UnreadableReference]?) {
        let dangling = references.dangling()
        danglingReferences = dangling.count + (unreadable?.count ?? 0)
        if let unreadable, !unreadable.isEmpty {
            let examples = unreadable.prefix(5).map { "\($0.id).\($0.relationship) (\($0.reason))" }
            problems.append(
                "\(unreadable.count) reference\(unreadable.count == 1 ? "" : "s") cannot be read as record ids "
                    + "(the store reads them as no reference): " + examples.joined(separator: ", ")
                    + (unreadable.count > 5 ? ", ..." : "")
            )
        }
        guard !dangling.isEmpty else { return }
        let examples = dangling.prefix(5).map { "\($0.source).\($0.relationship) -> \($0.target)" }
        let line =
            "\(dangling.count) reference\(dangling.count == 1 ? "" : "s") to records the store does not hold: "
            + examples.joined(separator: ", ") + (dangling.count > 5 ? ", ..." : "")
        if syncDevice != nil {
            notes.append(line + " (the store syncs: they may be records another device made that have not arrived yet)")
        } else {
            problems.append(line)
        }
    }
}

/// The ids every entity holds and the references every record makes, to find those whose
/// target is not there.
struct ReferenceCheck {
    struct Dangling: Hashable {
        var source: ObjectID
        var relationship: String
        var target: ObjectID
    }

    let schema: Schema
    private var ids: [String: Set<UUID>] = [:]
    private var references: [Dangling] = []

    init(schema: Schema) { self.schema = schema }

    /// Adds the records of one batch.
    mutating func add(_ records: [Record]) {
        for record in records {
            ids[record.id.entity, default: []].insert(record.id.uuid)
            for (name, target) in record.toOne {
                references.append(Dangling(source: record.id, relationship: name, target: target))
            }
            for (name, targets) in record.toMany {
                for target in targets {
                    references.append(Dangling(source: record.id, relationship: name, target: target))
                }
            }
        }
    }

    /// The references whose target is not among the records added, in order.
    func dangling() -> [Dangling] {
        references.filter { ids[$0.target.entity]?.contains($0.target.uuid) != true }
            .sorted { ($0.source, $0.relationship, $0.target) < ($1.source, $1.relationship, $1.target) }
    }
}
