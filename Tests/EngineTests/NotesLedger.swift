import Foundation
import Synchronization

@testable import notes

#if canImport(Glibc)
import Glibc
#endif

/// A device of the Notes sample on the engine: a data folder with a store of one type, and its
/// own copy of the container, which its Syncthing daemon carries.
struct EngineDevice: Sendable {
    let name: String
    let store: String
    let data: URL
    let container: URL

    /// `command` with the options every launch of this device takes.
    func arguments(_ command: [String]) -> [String] {
        command + ["--store", store, "--data", data.path, "--container", container.path, "--device", name]
    }
}

/// What a command meant to do: the ledger's checks read intent from here, not from the output.
enum NotesOperation: Sendable, Equatable {
    case addNote(title: String, folder: String, tag: String?, pin: Bool)
    case editNote(id: String, title: String? = nil, body: String? = nil, folder: String? = nil, pin: Bool? = nil)
    case deleteNote(id: String)
    case tagNote(id: String, label: String, remove: Bool)
    case addFolder(String)
    case deleteFolder(String)
    case list
    case listFolders
    case sync
    case status

    /// The command line (before the options every command takes).
    var command: [String] {
        switch self {
        case .addNote(let title, let folder, let tag, let pin):
            return ["add", title, "--folder", folder] + (tag.map { ["--tag", $0] } ?? []) + (pin ? ["--pin"] : [])
        case .editNote(let id, let title, let body, let folder, let pin):
            return ["edit", id] + (title.map { ["--title", $0] } ?? []) + (body.map { ["--body", $0] } ?? [])
                + (folder.map { ["--folder", $0] } ?? []) + (pin.map { [$0 ? "--pin" : "--no-pin"] } ?? [])
        case .deleteNote(let id): return ["delete", id]
        case .tagNote(let id, let label, let remove): return ["tag", id, label] + (remove ? ["--remove"] : [])
        case .addFolder(let name): return ["folder", "add", name]
        case .deleteFolder(let name): return ["folder", "delete", name]
        case .list: return ["list"]
        case .listFolders: return ["folder", "list"]
        case .sync: return ["sync"]
        case .status: return ["status"]
        }
    }

    /// The note it names (by the 8-digit id `list` prints), if any.
    var noteID: String? {
        switch self {
        case .editNote(let id, _, _, _, _), .deleteNote(let id), .tagNote(let id, _, _): return id
        default: return nil
        }
    }
}

/// One command run: who ran it, what it meant, when it ran (since the run began), how it ended
/// and what it printed.
struct LedgerEntry: Sendable {
    let index: Int
    let device: String
    let actor: String
    let operation: NotesOperation
    let start: Duration
    let end: Duration
    /// The exit status; `nil` when a signal ended it (a crash, or the timeout).
    let status: Int32?
    let lines: [String]
    let errors: String

    /// The command succeeded: what it did is acknowledged.
    var acknowledged: Bool { status == 0 }

    /// The id of the note an acknowledged `add` made (from its `added note ID` line).
    var addedID: String? {
        guard acknowledged, case .addNote = operation else { return nil }
        return lines.first { $0.hasPrefix("added note ") }.map { String($0.dropFirst("added note ".count).prefix(8)) }
    }

    /// The note this entry is about: the one it added or the one it named.
    var noteID: String? { addedID ?? operation.noteID }

    /// The warnings and errors the command logged on standard error while it succeeded
    /// (swift-log lines: `... warning concord.sync: ...`), without their timestamps.
    var loggedWarnings: [String] {
        errors.split(separator: "\n").filter {
            $0.contains(" warning ") || $0.contains(" error ") || $0.contains(" critical ")
        }
        .map { line in
            line.firstRange(of: #/(warning|error|critical) /#).map { String(line[$0.lowerBound...]) } ?? String(line)
        }
    }

    /// The entry as a line of the ledger: index, interval, device and actor, command, status,
    /// the line that says what it did (or standard error).
    var summary: String {
        let outcome = status.map { "exit \($0)" } ?? "KILLED"
        let said = lines.first {
            $0.hasPrefix("added ") || $0.hasPrefix("edited ") || $0.hasPrefix("deleted ") || $0.hasPrefix("tagged ")
        }
        let detail = acknowledged ? (said ?? "") : errors.trimmingCharacters(in: .whitespacesAndNewlines)
        // Sync's warnings are on standard error, repairs on standard output.
        let warnings =
            (lines + errors.split(separator: "\n").map(String.init)).filter {
                $0.hasPrefix("sync warning") || $0.hasPrefix("repaired ")
            }
            + (acknowledged ? loggedWarnings.prefix(2).map { "stderr: " + $0 } : [])
        return
            "#\(index) [\(seconds(start))–\(seconds(end))] \(device)/\(actor) notes \(operation.command.map(quotedIfNeeded).joined(separator: " ")) → \(outcome)"
            + (detail.isEmpty ? "" : ": \(detail)") + (warnings.isEmpty ? "" : " {\(warnings.joined(separator: "; "))}")
    }
}

/// Seconds with milliseconds, for ledger lines.
func seconds(_ duration: Duration) -> String {
    let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    return String(format: "%.3fs", Double(milliseconds) / 1000)
}

private func quotedIfNeeded(_ argument: String) -> String {
    argument.contains(" ") || argument.isEmpty ? "\"\(argument)\"" : argument
}

/// Every command the test ran, and every line the watch processes printed, in order, with
/// times since the run began. Threads record into it concurrently.
final class Ledger: Sendable {
    let origin = ContinuousClock.now
    private let entries = Mutex<[LedgerEntry]>([])
    private let watched = Mutex<[(at: Duration, device: String, line: String)]>([])

    /// Time since the run began.
    var now: Duration { ContinuousClock.now - origin }

    /// Runs `operation` on `device` as one `notes` process (bounded by `timeout`, then killed)
    /// and records it.
    @discardableResult
    func run(
        _ operation: NotesOperation,
        on device: EngineDevice,
        by actor: String,
        timeout: Duration = .seconds(60)
    ) -> LedgerEntry {
        let start = now
        var status: Int32?
        var lines: [String] = []
        var errors = ""
        do {
            let outcome = try withCleanSignalMask {
                try NotesProcess.run(device.arguments(operation.command), timeout: timeout)
            }
            status = outcome.status
            lines = outcome.lines
            errors = outcome.errors
            if outcome.status == nil {
                errors += outcome.crashed ? " (ended by a signal)" : " (timed out after \(timeout); killed)"
            }
        } catch {
            errors = "could not start notes: \(error)"
        }
        let end = now
        return entries.withLock { entries in
            let entry = LedgerEntry(
                index: entries.count + 1,
                device: device.name,
                actor: actor,
                operation: operation,
                start: start,
                end: end,
                status: status,
                lines: lines,
                errors: errors
            )
            entries.append(entry)
            return entry
        }
    }

    /// The whole ledger with every line each command printed and its standard error.
    func fullText() -> String {
        all.map { entry in
            ([entry.summary] + entry.lines.map { "    | " + $0 }
                + entry.errors.split(separator: "\n").map { "    ! " + $0 }).joined(separator: "\n")
        }.joined(separator: "\n") + "\n"
    }

    /// Records a line a watch process printed.
    func recordWatch(_ line: String, device: String) {
        let at = now
        watched.withLock { $0.append((at, device, line)) }
    }

    var all: [LedgerEntry] { entries.withLock { $0 } }

    /// Every line the watch processes printed, with when and on which device.
    var watchLines: [(at: Duration, device: String, line: String)] { watched.withLock { $0 } }

    /// The whole ledger as text: the commands, then the watch processes' lines.
    func text() -> String {
        all.map(\.summary).joined(separator: "\n") + "\n\n"
            + watched.withLock { $0 }.map { "[\(seconds($0.at))] \($0.device)/watch \($0.line)" }.joined(
                separator: "\n"
            ) + "\n"
    }

    /// The ledger lines about `noteID` (commands that added or named it).
    func lines(about noteID: String) -> [String] {
        all.filter { $0.noteID == noteID }.map(\.summary)
    }
}

/// `notes watch` on a device: a thread reads its lines as they come (into the ledger, and
/// for tests to wait on) so it never blocks on a full pipe.
final class WatchProcess: @unchecked Sendable {
    let device: EngineDevice
    private let process: NotesProcess
    private let seen = Guarded<[String]>([])
    private let finished = DispatchSemaphore(value: 0)

    /// Starts `notes watch` and waits (bounded) until it says `ready`.
    init(_ device: EngineDevice, ledger: Ledger, timeout: Duration = .seconds(30)) throws {
        self.device = device
        process = try withCleanSignalMask { try NotesProcess(device.arguments(["watch"])) }
        let process = self.process
        let seen = self.seen
        let finished = self.finished
        Thread.detachNewThread {
            while true {
                if let line = process.readLine(timeout: .seconds(1)) {
                    seen.withLock { $0.append(line) }
                    ledger.recordWatch(line, device: device.name)
                } else if !process.process.isRunning {
                    while let line = process.readLine(timeout: .milliseconds(100)) {
                        seen.withLock { $0.append(line) }
                        ledger.recordWatch(line, device: device.name)
                    }
                    break
                }
            }
            finished.signal()
        }
        guard waitForLine(timeout: timeout, where: { $0 == "ready" }) else {
            process.signal(SIGKILL)
            throw SyncthingError(
                "notes watch on \(device.name) did not say ready within \(timeout): \(lines) \(process.standardError)"
            )
        }
    }

    /// Every line so far.
    var lines: [String] { seen.withLock { $0 } }

    /// Waits (bounded) for a line that satisfies `predicate` (lines already seen count).
    func waitForLine(timeout: Duration, where predicate: (String) -> Bool) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if seen.withLock({ $0.contains(where: predicate) }) { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return seen.withLock { $0.contains(where: predicate) }
    }

    /// Stops it with SIGTERM (SIGKILL after a bound) by its PID; its exit status (`nil` if it
    /// had to be killed) and standard error.
    func stop(timeout: Duration = .seconds(20)) -> (status: Int32?, errors: String) {
        process.signal(SIGTERM)
        let status = process.waitForExit(timeout: timeout)
        _ = finished.wait(timeout: .now() + .seconds(5))
        return (status, process.standardError)
    }

    deinit { process.signal(SIGKILL) }
}

/// A `note ...` line (as `list` prints it, after `added `, `edited `, `+ `), read back.
struct NoteLine: Equatable, CustomStringConvertible {
    var id: String
    var fields: [String: String]
    var raw: String

    var folder: String? { fields["folder"] }
    var title: String? { fields["title"] }
    var description: String { raw }

    /// Reads `note ID key=value ...` (values quoted with `\"`, `\\`, `\n`, `\t` escaped, or bare
    /// up to a space); `nil` when the line is not a note.
    init?(_ line: String) {
        guard let start = line.range(of: "note ") else { return nil }
        let text = Array(line[start.upperBound...])
        guard text.count >= 8 else { return nil }
        id = String(text[0..<8])
        fields = [:]
        raw = line
        var index = 8
        while index < text.count {
            while index < text.count && text[index] == " " { index += 1 }
            var key = ""
            while index < text.count && text[index] != "=" && text[index] != " " {
                key.append(text[index])
                index += 1
            }
            guard index < text.count, text[index] == "=" else { break }
            index += 1
            var value = ""
            if index < text.count && text[index] == "\"" {
                index += 1
                while index < text.count && text[index] != "\"" {
                    if text[index] == "\\", index + 1 < text.count {
                        index += 1
                        switch text[index] {
                        case "n": value.append("\n")
                        case "t": value.append("\t")
                        default: value.append(text[index])
                        }
                    } else {
                        value.append(text[index])
                    }
                    index += 1
                }
                index += 1
            } else {
                while index < text.count && text[index] != " " {
                    value.append(text[index])
                    index += 1
                }
            }
            fields[key] = value
        }
    }
}
