import ArgumentParser
import FolderSync
import Foundation
import Persistence

/// `concord log FILE`: one log (or baseline) decoded, header and changes.
struct LogCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Decode one sync log or baseline file: its header, then its changes.",
        discussion: """
            A damaged, cut-short or newer-format file prints a typed error naming the file on \
            standard error and exits with status 1.
            """)

    @Argument(help: "A log (*.cclog, or a sync engine's conflict copy of one) or a baseline (baseline-*.ccbase).")
    var file: String

    @Flag(help: "Print the file as JSON.")
    var json = false

    func run() throws {
        let url = URL(fileURLWithPath: file).standardizedFileURL
        let decoded: DecodedLogFile
        do {
            decoded = try DecodedLogFile.read(url)
        } catch {
            throw Output.fail("\(error)")
        }
        if json {
            try Output.json(LogJSON(decoded))
        } else {
            for line in Self.lines(decoded) { Output.data(line) }
        }
    }

    /// The file as a person reads it.
    static func lines(_ decoded: DecodedLogFile) -> [String] {
        let log = decoded.log
        var lines = [
            "file: \(decoded.url.path)",
            "kind: \(decoded.isBaseline ? "baseline" : "log")",
            "device: \(log.device)",
            "sequence: \(log.sequence)",
            "format: \(log.formatVersion)",
            "schema: \(log.schemaVersion)",
            "created: \(Output.timestamp(log.created))",
        ]
        if decoded.isBaseline {
            lines.append("covers: \(positions(decoded.covers))")
        } else {
            lines.append("dependencies: \(positions(decoded.dependencies))")
        }
        lines.append("changes: \(decoded.changes.count)")
        for change in decoded.changes {
            var head = "  \(change.id)"
            if let created = change.created { head += " created \(clock(created))" }
            if let deleted = change.deleted { head += " deleted \(clock(deleted))" }
            lines.append(head)
            for (name, value) in change.values.sorted(by: { $0.key < $1.key }) {
                lines.append("    \(name) = \(value.value) \(clock(value.clock))")
            }
            for (name, reference) in change.references.sorted(by: { $0.key < $1.key }) {
                lines.append("    \(name) -> \(reference.target.map { "\($0)" } ?? "none") \(clock(reference.clock))")
            }
            for (name, members) in change.members.sorted(by: { $0.key < $1.key }) {
                for member in members {
                    lines.append("    \(name) \(member.present ? "+" : "-") \(member.target) \(clock(member.clock))")
                }
            }
        }
        return lines
    }

    /// `alpha@3 beta@7`, or `none`.
    static func positions(_ positions: [String: UInt64]) -> String {
        positions.isEmpty ? "none" : positions.sorted { $0.key < $1.key }.map { "\($0.key)@\($0.value)" }.joined(separator: " ")
    }

    /// `@2026-11-24T18:44:37.123Z.0 by alpha`.
    static func clock(_ clock: SyncClock) -> String {
        "@\(Output.timestamp(Date(timeIntervalSince1970: Double(clock.time) / 1000)))#\(clock.counter) by \(clock.device)"
    }
}

/// `concord log --json`: the header's fields, then the changes in their Codable form with each
/// clock's time also as ISO 8601.
struct LogJSON: Encodable {
    var file: String
    var kind: String
    var device: String
    var sequence: UInt64
    var formatVersion: UInt16
    var schemaVersion: Int
    var created: Date
    var dependencies: [String: UInt64]?
    var covers: [String: UInt64]?
    var changeCount: Int
    var changes: [SyncChange]

    init(_ decoded: DecodedLogFile) {
        file = decoded.url.path
        kind = decoded.isBaseline ? "baseline" : "log"
        device = decoded.log.device
        sequence = decoded.log.sequence
        formatVersion = decoded.log.formatVersion
        schemaVersion = decoded.log.schemaVersion
        created = decoded.log.created
        dependencies = decoded.isBaseline ? nil : decoded.dependencies
        covers = decoded.isBaseline ? decoded.covers : nil
        changeCount = decoded.changes.count
        changes = decoded.changes
    }
}
