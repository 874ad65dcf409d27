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
                Copies the store's files (for SQLite the database with its -wal and -shm) and checks \
                the copy as the store's plugin opens it: an SQLite copy has its -wal replayed (a \
                session left open, or killed in a checkpoint, is healthy), then PRAGMA \
                integrity_check runs (pages, and every index against its table). Every record of \
                every entity is read, and every to-one and to-many target must be a record the \
                store holds (in a store that syncs, a missing target is a note: it may not have \
                arrived yet). The original is never opened.

                Exit status: 0 when the store is healthy, 1 when it opens but is damaged (records \
                cannot be read, an index disagrees with its table, a reference is broken), 2 when \
                it does not open.
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
            let report: StoreCheck
            do {
                report = try StoreCheck.run(path: store, type: type, schemaFrom: schemaFrom)
            } catch {
                if json {
                    var failed = StoreCheck(
                        path: URL(fileURLWithPath: store).standardizedFileURL.path,
                        type: type ?? ""
                    )
                    failed.error = "\(error)"
                    failed.problems = ["\(error)"]
                    try Output.json(failed)
                }
                throw Output.fail("\(error)", status: 2)
            }
            if json {
                try Output.json(report)
            } else {
                Output.data("store \(report.path) (\(report.type)): \(report.opened ? "opens" : "does not open")")
                if report.replayedLog { Output.data("  -wal: its frames replayed into the copy checked") }
                if let version = report.schemaVersion { Output.data("  schema version \(version)") }
                if let identifier = report.storeIdentifier { Output.data("  identifier \(identifier)") }
                if let device = report.syncDevice { Output.data("  sync device \(device)") }
                for (entity, count) in report.records.sorted(by: { $0.key < $1.key }) {
                    Output.data("  \(entity): \(count) records")
                }
                Output.data("  metadata entries: \(report.metadataEntries)")
                if let integrity = report.integrity, integrity == ["ok"] { Output.data("  integrity_check: ok") }
                for note in report.notes { Output.data("  note: \(note)") }
                for problem in report.problems { Output.data("  problem: \(problem)") }
                Output.data(
                    report.problems.isEmpty ? "ok" : "damaged: `concord store salvage` copies what can be read"
                )
            }
            if report.status != 0 { throw ExitCode(report.status) }
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

                A record whose reference cannot be read (a damaged row) is copied without it and \
                listed as altered; references to records that were lost are kept and listed.

                Exit status: 0 when every record was copied as it was, 1 when some could not be \
                read, were altered, or refer to lost records, 2 when nothing could be salvaged. \
                With --json, a JSON object is printed in every case (with "error" when the \
                salvage could not start).
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
                if json {
                    var failed = SalvageReport(
                        source: URL(fileURLWithPath: store).standardizedFileURL.path,
                        destination: URL(fileURLWithPath: to).standardizedFileURL.path,
                        sourceType: from ?? "",
                        destinationType: type ?? ""
                    )
                    failed.error = "\(error)"
                    try Output.json(failed)
                }
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
                for altered in report.altered {
                    Output.data(
                        "  altered \(altered.id): its \(altered.relationship) could not be read (\(altered.reason)); copied without it"
                    )
                }
                if report.danglingCount > 0 {
                    Output.data(
                        "  \(report.danglingCount) reference\(report.danglingCount == 1 ? "" : "s") to records not copied, kept as they were"
                            + (report.sourceSyncs ? " (the store syncs: rejoining may bring them back)" : "") + ": "
                            + report.danglingReferences.prefix(5).joined(separator: ", ")
                            + (report.danglingCount > 5 ? ", ..." : "")
                    )
                }
                for note in report.notes { Output.data("  note: \(note)") }
                Output.data(
                    report.isComplete
                        ? "every record copied as it was"
                        : report.skipped.isEmpty && report.altered.isEmpty && report.danglingCount > 0
                            ? "every readable record copied, but some refer to records that were lost (listed above)"
                            : "some records could not be read, or were copied altered (listed above)"
                )
            }
            if !report.isComplete { throw ExitCode(1) }
        }
    }
}
