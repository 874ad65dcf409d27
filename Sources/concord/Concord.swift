import ArgumentParser
import FileCoordination
import Foundation

/// The `concord` command-line tool.
@main
struct ConcordCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "concord",
        abstract: "File coordination, presenters and folder sync for Linux.",
        discussion: """
            Data lines go to standard output, status and errors to standard error. Timestamps are \
            ISO 8601 (UTC).
            """,
        version: Concord.version,
        subcommands: [Doctor.self, LogCommand.self, StoreCommand.self, Watch.self, Demo.self]
    )
}

/// Where the tool writes: data lines to standard output, status and errors to standard error.
enum Output {
    /// A data line (what a script reads).
    static func data(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// A status line (what a person reads; not part of the data).
    static func status(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    /// `value` as pretty, key-sorted JSON with ISO 8601 dates, on standard output.
    static func json<T: Encodable>(_ value: T) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(timestamp(date))
        }
        data(String(decoding: try encoder.encode(value), as: UTF8.self))
    }

    /// `2026-11-24T18:44:37.123Z`.
    static func timestamp(_ date: Date) -> String {
        date.formatted(
            Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: TimeZone(identifier: "UTC")!)
        )
    }

    /// Fails the command with `message` on standard error and exit status `status`.
    static func fail(_ message: String, status: Int32 = 1) -> ExitCode {
        self.status("concord: " + message)
        return ExitCode(status)
    }
}
