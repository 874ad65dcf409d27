import ConcordTestSupport
import Foundation
import GRDB
import Testing

@testable import notes

/// A damaged SQLite store is never written, and a read that an index answers is never silently
/// short: 16 random bytes in an index page (the damage that made `notes list --folder Inbox`
/// answer 578 of 1,000 notes) are found by `PRAGMA integrity_check` before the first write of a
/// launch, when the store was not closed cleanly or its last full check is older than the
/// interval; the open then fails naming the file and the commands to run. A store opens
/// read-only with `--read-only`, also in a folder this user may not write.
@Suite("Damaged pages and read-only opens")
struct DamagedPageTests {
    let directory = TemporaryDirectory("notes-damaged")

    /// A data folder with an SQLite store of `count` notes, closed cleanly.
    func makeStore(_ name: String, count: Int) throws -> URL {
        let data = directory(name)
        for index in 0..<count {
            let added = try NotesProcess.run(
                [
                    "add", "note \(index)", "--body", String(repeating: "text ", count: 20), "--data", data.path,
                    "--offline", "--create",
                ],
                timeout: .seconds(60)
            )
            try #require(added.status == 0, "add: \(added)")
        }
        return data
    }

    /// The root page of the notes' folder index.
    static func folderIndexRoot(_ store: URL) throws -> Int {
        var configuration = Configuration()
        configuration.readonly = true
        let queue = try DatabaseQueue(path: store.path, configuration: configuration)
        defer { try? queue.close() }
        let root = try queue.read { db in
            try Int.fetchOne(db, sql: "SELECT rootpage FROM sqlite_master WHERE name = 'Note_folder_index'")
        }
        return try #require(root)
    }

    /// The store's files in `data`, by name (a `-wal` made would show). Not the `-shm`: SQLite
    /// makes one to read through a `-wal`, its index of the log, never part of the store.
    static func files(_ data: URL) throws -> [String: Data] {
        var result: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: data.path) where !name.hasSuffix("-shm") {
            result[name] = FileManager.default.contents(atPath: data.appendingPathComponent(name).path)
        }
        return result
    }

    /// Each command must fail naming the store and the check that found the damage, and
    /// leave every file as it was.
    func expectRefused(
        _ data: URL,
        _ commands: [[String]],
        saying reason: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let store = data.appendingPathComponent("notes.sqlite").path
        let before = try Self.files(data)
        for command in commands {
            let run = try NotesProcess.run(command + ["--data", data.path, "--offline"], timeout: .seconds(60))
            let said =
                "notes \(command.joined(separator: " ")): \(run.status.map(String.init) ?? "killed") \(run.errors) \(run.lines)"
            #expect(run.status != 0 && !run.crashed, "\(said)", sourceLocation: sourceLocation)
            #expect(
                run.lines.filter { $0.hasPrefix("note ") }.isEmpty,
                "nothing listed: \(said)",
                sourceLocation: sourceLocation
            )
            for part in [store, "integrity_check", reason, "concord store check", "concord store salvage"] {
                #expect(run.errors.contains(part), "names \(part): \(said)", sourceLocation: sourceLocation)
            }
            #expect(try Self.files(data) == before, "nothing written: \(said)", sourceLocation: sourceLocation)
        }
    }

    @Test(
        "index damage in a cleanly closed store whose last full check is a day old: every open refuses, nothing is written"
    )
    func staleCheckFindsIndexDamage() throws {
        let data = try makeStore("stale", count: 20)
        let store = data.appendingPathComponent("notes.sqlite")
        // The last full check two days ago (the store records it; the interval is one day).
        let queue = try DatabaseQueue(path: store.path)
        try queue.write { db in
            try db.execute(
                sql: "UPDATE concord_metadata SET value = ? WHERE key = 'store.integrityChecked'",
                arguments: [Data(String(Date().timeIntervalSince1970 - 2 * 86_400).utf8)]
            )
            #expect(db.changesCount == 1, "the store records its last full check")
        }
        try queue.close()
        let root = try Self.folderIndexRoot(store)
        let page = try #require(SQLitePages.indexLeaves(try Data(contentsOf: store), root: root).first)
        try SQLitePages.scribble(on: page, of: store)
        let log = FileManager.default.contents(atPath: store.path + "-wal") ?? Data()
        #expect(log.isEmpty, "closed cleanly: no frames in a -wal")

        try expectRefused(
            data,
            [["list", "--folder", "Inbox"], ["add", "after the damage"], ["list", "--read-only"]],
            saying: "the last full check was 48 hours ago"
        )
    }

    @Test("index damage in a store not closed cleanly (frames left in the -wal): the open refuses before any write")
    func uncleanCloseFindsIndexDamage() throws {
        let source = try makeStore("source", count: 20)
        let store = source.appendingPathComponent("notes.sqlite")
        let root = try Self.folderIndexRoot(store)
        // A connection commits and stays open: the files copied now are those a killed process leaves.
        let open = try DatabaseQueue(path: store.path)
        try open.write { db in try db.execute(sql: "UPDATE \"Note\" SET body = 'changed' WHERE title = 'note 3'") }
        let data = directory.makeDirectory("crashed")
        for name in ["notes.sqlite", "notes.sqlite-wal"] {
            try FileManager.default.copyItem(
                at: source.appendingPathComponent(name),
                to: data.appendingPathComponent(name)
            )
        }
        try open.close()
        let copy = data.appendingPathComponent("notes.sqlite")
        let log = try WriteAheadLog(Data(contentsOf: URL(fileURLWithPath: copy.path + "-wal")))
        try #require(!log.pages.isEmpty, "frames in the -wal")
        let leaves = SQLitePages.indexLeaves(try Data(contentsOf: copy), root: root).filter { log.pages[$0] == nil }
        try SQLitePages.scribble(on: try #require(leaves.first, "an index leaf only the file holds"), of: copy)

        try expectRefused(data, [["add", "after the crash"], ["list"]], saying: "it was not closed cleanly")
    }

    @Test("--read-only: lists without writing a byte (no -wal, no -shm), and a command that saves fails saying why")
    func readOnlyOpen() throws {
        for kind in ["sqlite", "json", "plist"] {
            let data = directory("read-only-\(kind)")
            let added = try NotesProcess.run(
                ["add", "kept", "--data", data.path, "--store", kind, "--offline", "--create"],
                timeout: .seconds(60)
            )
            try #require(added.status == 0, "\(added)")
            let before = try Self.files(data)
            let listed = try NotesProcess.run(["list", "--data", data.path, "--read-only"], timeout: .seconds(60))
            #expect(listed.status == 0, "\(kind): \(listed)")
            #expect(
                listed.lines.filter { $0.hasPrefix("note ") && $0.contains("kept") }.count == 1,
                "\(kind): \(listed)"
            )
            let refused = try NotesProcess.run(
                ["add", "more", "--data", data.path, "--read-only"],
                timeout: .seconds(60)
            )
            #expect(refused.status != 0 && refused.errors.contains("read-only"), "\(kind): \(refused)")
            #expect(!refused.errors.contains("saved"), "never says saved: \(kind): \(refused)")
            #expect(try Self.files(data) == before, "\(kind): nothing written")
        }
    }

    @Test(
        "a store in a folder this user may not write opens with --read-only (as root: run as nobody through setpriv)",
        .enabled(if: getuid() != 0 || FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"))
    )
    func readOnlyFolder() throws {
        for kind in ["sqlite", "json"] {
            let data = directory("locked-\(kind)")
            let added = try NotesProcess.run(
                ["add", "kept", "--data", data.path, "--store", kind, "--offline", "--create"],
                timeout: .seconds(60)
            )
            try #require(added.status == 0, "\(added)")
            // Readable by everyone, writable by its owner only (root, when the test runs as root).
            for path in [directory.url.path, data.path] {
                try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path)
            }
            try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: data.path)
            defer { try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: data.path) }
            func run(_ arguments: [String]) throws -> (Subprocess.Termination?, [String], String) {
                let notes = NotesProcess.executableURL.path
                let child =
                    getuid() == 0
                    ? try Subprocess(
                        "/usr/bin/setpriv",
                        ["--reuid=65534", "--regid=65534", "--clear-groups", notes] + arguments,
                        captureStandardError: true
                    )
                    : try Subprocess(notes, arguments, captureStandardError: true)
                var lines: [String] = []
                while let line = child.readLine(timeout: .seconds(60)) { lines.append(line) }
                return (child.wait(timeout: .seconds(60)), lines, child.readStandardError())
            }
            let (listed, lines, errors) = try run(["list", "--data", data.path, "--read-only"])
            #expect(listed == .exited(0), "\(kind): \(lines) \(errors)")
            #expect(lines.contains { $0.hasPrefix("note ") && $0.contains("kept") }, "\(kind): \(lines) \(errors)")
            let (written, _, refusal) = try run(["add", "more", "--data", data.path, "--offline"])
            #expect(written != .exited(0), "\(kind): cannot write there: \(refusal)")
            #expect(!refusal.contains("changes are saved"), "never says saved: \(refusal)")
        }
    }
}
