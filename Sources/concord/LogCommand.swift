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
            """
    )

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
        if !decoded.incarnations.isEmpty {
            lines.append("incarnations:")
            for (id, created) in decoded.incarnations.sorted(by: { $0.key < $1.key }) {
                lines.append("  \(id) created \(clock(created))")
            }
        }
        lines.append("changes: \(decoded.changes.count)")
        for change in decoded.changes {
            var head = "  \(change.id)"
            if let created = change.created { head += " created \(clock(created))" }
            if let deleted = change.deleted { head += " deleted \(clock(deleted))" }
            lines.append(head)
            for (name, value) in change.values.sorted(by: { $0.key < $1.key }) {
                lines.append("    \(name) = \(text(value.value)) \(clock(value.clock))")
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

    /// A value as the text output shows it: dates in ISO 8601.
    static func text(_ value: Value) -> String {
        if case .date(let date) = value { return "date(\(Output.timestamp(date)))" }
        return value.description
    }

    /// `alpha@3 beta@7`, or `none`.
    static func positions(_ positions: [String: UInt64]) -> String {
        positions.isEmpty
            ? "none" : positions.sorted { $0.key < $1.key }.map { "\($0.key)@\($0.value)" }.joined(separator: " ")
    }

    /// `@2026-11-24T18:44:37.123Z.0 by alpha`.
    static func clock(_ clock: SyncClock) -> String {
        "@\(Output.timestamp(Date(timeIntervalSince1970: Double(clock.time) / 1000)))#\(clock.counter) by "
            + "\(clock.device)"
    }
}

/// `concord log --json`: the header's fields, then the changes, values as JSON values (dates
/// as ISO 8601, data as base64) and clocks with their time also as ISO 8601.
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
    var incarnations: [String: ClockJSON]?
    var changeCount: Int
    var changes: [ChangeJSON]

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
        incarnations =
            decoded.incarnations.isEmpty
            ? nil
            : Dictionary(uniqueKeysWithValues: decoded.incarnations.map { ("\($0.key)", ClockJSON($0.value)) })
        changeCount = decoded.changes.count
        changes = decoded.changes.map(ChangeJSON.init)
    }

    struct ClockJSON: Encodable {
        var time: UInt64
        var date: String
        var counter: UInt32
        var device: String
        init(_ clock: SyncClock) {
            time = clock.time
            date = Output.timestamp(Date(timeIntervalSince1970: Double(clock.time) / 1000))
            counter = clock.counter
            device = clock.device
        }
    }

    struct ValueJSON: Encodable {
        var type: String?
        var value: Value
        var clock: ClockJSON

        func encode(to encoder: any Encoder) throws {
            enum Keys: String, CodingKey { case type, value, clock }
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(value.type?.rawValue ?? "null", forKey: .type)
            try container.encode(clock, forKey: .clock)
            switch value {
            case .null: try container.encodeNil(forKey: .value)
            case .string(let text): try container.encode(text, forKey: .value)
            case .integer(let number): try container.encode(number, forKey: .value)
            case .double(let number) where number.isFinite: try container.encode(number, forKey: .value)
            case .double(let number): try container.encode(String(number), forKey: .value)
            case .boolean(let flag): try container.encode(flag, forKey: .value)
            case .date(let date): try container.encode(Output.timestamp(date), forKey: .value)
            case .data(let data): try container.encode(data.base64EncodedString(), forKey: .value)
            case .uuid(let uuid): try container.encode(uuid.uuidString.lowercased(), forKey: .value)
            }
        }
    }

    struct ReferenceJSON: Encodable {
        var target: String?
        var clock: ClockJSON
    }

    struct MemberJSON: Encodable {
        var target: String
        var present: Bool
        var clock: ClockJSON
    }

    struct ChangeJSON: Encodable {
        var id: String
        var created: ClockJSON?
        var deleted: ClockJSON?
        var values: [String: ValueJSON]
        var references: [String: ReferenceJSON]
        var members: [String: [MemberJSON]]

        init(_ change: SyncChange) {
            id = "\(change.id)"
            created = change.created.map(ClockJSON.init)
            deleted = change.deleted.map(ClockJSON.init)
            values = change.values.mapValues { ValueJSON(value: $0.value, clock: ClockJSON($0.clock)) }
            references = change.references.mapValues {
                ReferenceJSON(target: $0.target.map { "\($0)" }, clock: ClockJSON($0.clock))
            }
            members = change.members.mapValues {
                $0.map { MemberJSON(target: "\($0.target)", present: $0.present, clock: ClockJSON($0.clock)) }
            }
        }
    }
}
