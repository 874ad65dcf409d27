import ArgumentParser
import Foundation
import Persistence

/// `concord store check|salvage`.
struct StoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store",
        abstract: "Check a store, or copy what can be read of a damaged one into a new store.",
        subcommands: [Check.self, SalvageCommand.self]
    )

    /// `concord store check STORE`.
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a store without changing it.",
            discussion: """
                Copies the store's files (for SQLite the database with its -wal and -shm) and opens \
                the copy with the plugin's integrity check (SQLite: PRAGMA quick_check), then reads \
                every record of every entity. The original is never opened.

                Exit status: 0 when the store is healthy, 1 when it opens but records cannot be \
                read, 2 when it does not open.
                """
        )

        @Argument(help: "The store file, or a data folder holding one.")
        var store: String

        @Option(help: "The store's type (default: from its first bytes).")
        var type: String?

        @Option(help: "Read the schema from this store (of any type) instead of the checked one.")
        var schemaFrom: String?

        @Flag(help: "Print the result as JSON.")
        var json = false

        func run() throws {
            let report = try StoreCheck.run(path: store, type: type, schemaFrom: schemaFrom)
            if json {
                try Output.json(report)
            } else {
                Output.data("store \(report.path) (\(report.type)): \(report.opened ? "opens" : "does not open")")
                if let version = report.schemaVersion { Output.data("  schema version \(version)") }
                if let identifier = report.storeIdentifier { Output.data("  identifier \(identifier)") }
                if let device = report.syncDevice { Output.data("  sync device \(device)") }
                for (entity, count) in report.records.sorted(by: { $0.key < $1.key }) {
                    Output.data("  \(entity): \(count) records")
                }
                Output.data("  metadata entries: \(report.metadataEntries)")
                for problem in report.problems { Output.data("  problem: \(problem)") }
                Output.data(report.problems.isEmpty ? "ok" : "damaged: `concord store salvage` copies what can be read")
            }
            let status: Int32 = report.problems.isEmpty ? 0 : report.opened ? 1 : 2
            if status != 0 { throw ExitCode(status) }
        }
    }

    /// `concord store salvage STORE --to NEWSTORE`.
    struct SalvageCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "salvage",
            abstract: "Copy every readable record of a damaged store into a new store.",
            discussion: """
                The schema is the one the damaged store recorded (SQLite keeps it in its metadata \
                table, JSON and property-list stores in the document); when that cannot be read \
                (a document cut short), give --schema-from with another store of the same app. \
                Damaged SQLite pages are skipped by seeking past them; an archive's records are \
                decoded one by one. What could not be read is listed.

                The app's metadata and the sync device id are copied; sync's other bookkeeping \
                (clocks, applied logs, numbering, outbox) is left out, so the new store rejoins as a \
                restoring device: the container's logs, its own included, are imported again and \
                bring back what the damage lost (with --records-only, no metadata is copied: the \
                store joins as a new device would).

                Exit status: 0 when every record was copied, 1 when some could not be read, 2 when \
                nothing could be salvaged.
                """
        )

        @Argument(help: "The damaged store file (or a data folder holding one).")
        var store: String

        @Option(help: "Where to write the new store (must not exist).")
        var to: String

        @Option(help: "The new store's type (default: the damaged store's).")
        var type: String?

        @Option(help: "The damaged store's type (default: from its first bytes).")
        var from: String?

        @Option(help: "Read the schema from this store (of any type) instead of the damaged one.")
        var schemaFrom: String?

        @Flag(help: "Copy records only, no metadata (sync then treats the store as a new device's).")
        var recordsOnly = false

        @Flag(help: "Print the result as JSON.")
        var json = false

        func run() throws {
            let report: SalvageReport
            do {
                let source = try StoreAccess.storeFile(store)
                let sourceType = try StoreAccess.type(of: source, named: from)
                let destinationType = try StoreAccess.registry.storeType(named: type ?? sourceType.storeType)
                let schema = try StoreAccess.schema(of: source, type: sourceType.storeType, from: schemaFrom)
                report = try Salvage.run(
                    source: source,
                    type: sourceType,
                    schema: schema,
                    to: URL(fileURLWithPath: to).standardizedFileURL,
                    as: destinationType,
                    recordsOnly: recordsOnly
                )
            } catch {
                throw Output.fail("\(error)", status: 2)
            }
            if json {
                try Output.json(report)
            } else {
                Output.data(
                    "salvaged \(report.source) (\(report.sourceType)) into \(report.destination) "
                        + "(\(report.destinationType)), read "
                        + "\(report.method == "store" ? "through the store" : "record by record from the document")"
                )
                for (entity, count) in report.recovered.sorted(by: { $0.key < $1.key }) {
                    let expected = report.expected[entity].map { " of \($0)" } ?? ""
                    let lost = report.expected[entity].map { $0 > count ? " (\($0 - count) lost)" : "" } ?? ""
                    Output.data("  \(entity): \(count)\(expected) records\(lost)")
                }
                for skipped in report.skipped {
                    let what =
                        skipped.id.map { "record \($0)" }
                        ?? (skipped.after == nil && skipped.before == nil
                            ? "records"
                            : "records after \(skipped.after ?? "the start") and before \(skipped.before ?? "the end")")
                    Output.data("  skipped \(skipped.entity) \(what): \(skipped.reason)")
                }
                Output.data("  metadata: \(report.metadataCopied) entries copied, \(report.metadataLeftOut) left out")
                for note in report.notes { Output.data("  note: \(note)") }
                Output.data(report.isComplete ? "every record copied" : "some records could not be read (listed above)")
            }
            if !report.isComplete { throw ExitCode(1) }
        }
    }
}

/// What `concord store check` found.
struct StoreCheck: Encodable {
    var path: String
    var type: String
    var opened = false
    var schemaVersion: Int?
    var storeIdentifier: String?
    var syncDevice: String?
    var records: [String: Int] = [:]
    var metadataEntries = 0
    var problems: [String] = []

    static func run(path: String, type name: String?, schemaFrom: String?) throws -> StoreCheck {
        let url: URL
        let type: any PersistentStore.Type
        do {
            url = try StoreAccess.storeFile(path)
            type = try StoreAccess.type(of: url, named: name)
        } catch {
            throw Output.fail("\(error)", status: 2)
        }
        var check = StoreCheck(path: url.path, type: type.storeType)
        let copy: URL
        do { copy = try StoreAccess.copy(url, type: type) } catch { throw Output.fail("\(error)", status: 2) }
        defer { try? FileManager.default.removeItem(at: copy.deletingLastPathComponent()) }
        if type.storeType == "sqlite", let (pages, bytes) = SQLiteFile.missingPages(url) {
            check.problems.append(
                "the database is truncated: its header counts \(pages) pages (\(bytes) bytes) past its end"
            )
        }
        let schema: Schema
        do {
            schema =
                try schemaFrom == nil
                ? StoreAccess.schema(of: copy, type: type.storeType)
                : StoreAccess.schema(of: url, type: type.storeType, from: schemaFrom)
        } catch {
            check.problems.append("\(error)".replacingOccurrences(of: copy.path, with: url.path))
            return check
        }
        let store: any PersistentStore
        do {
            store = try StoreAccess.open(copy, type: type, schema: schema)
        } catch {
            check.problems.append("\(error)".replacingOccurrences(of: copy.path, with: url.path))
            return check
        }
        defer { store.close() }
        check.opened = true
        if let metadata = try? store.metadata() {
            check.schemaVersion = metadata.schemaVersion
            check.storeIdentifier = metadata.storeIdentifier.uuidString.lowercased()
            check.metadataEntries = metadata.entries.count
            check.syncDevice = metadata.entries["sync.device"].map { String(decoding: $0, as: UTF8.self) }
        } else {
            check.problems.append("the metadata cannot be read")
        }
        for entity in schema.entities {
            var count = 0
            do {
                try store.enumerateRecords(of: entity.name, batchSize: 1000) { count += $0.count }
                let counted = try store.count(for: FetchRequest(entity: entity.name))
                if counted != count {
                    check.problems.append("\(entity.name): \(counted) records counted, \(count) read")
                }
            } catch {
                check.problems.append(
                    "\(entity.name): reading stopped after \(count) records: \(error)".replacingOccurrences(
                        of: copy.path,
                        with: url.path
                    )
                )
            }
            check.records[entity.name] = count
        }
        return check
    }
}
