import ConcordTestSupport
import Foundation
import Testing

@testable import notes

/// A device of the Notes sample: a data folder with a store of one type, syncing through a
/// container. Each command is a separate `notes` process, as a user runs it.
struct NotesDevice {
    let name: String
    let store: String
    let data: URL
    let container: URL

    init(_ name: String, store: String, in directory: TemporaryDirectory) {
        self.name = name
        self.store = store
        data = directory(name)
        container = directory("container")
    }

    func arguments(_ command: [String], offline: Bool = false) -> [String] {
        command + ["--store", store, "--data", data.path, "--container", container.path, "--device", name]
            + (offline ? ["--offline"] : [])
    }

    /// Runs `command` to its end; records an issue unless it succeeds.
    @discardableResult
    func run(
        _ command: [String],
        offline: Bool = false,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> [String] {
        let outcome = try NotesProcess.run(arguments(command, offline: offline), timeout: .seconds(30))
        #expect(
            outcome.status == 0,
            "notes \(command.joined(separator: " ")) on \(name) failed: \(outcome.errors) \(outcome.lines)",
            sourceLocation: sourceLocation
        )
        return outcome.lines
    }

    /// The `list` lines.
    func notes(sourceLocation: SourceLocation = #_sourceLocation) throws -> [String] {
        try run(["list"], sourceLocation: sourceLocation).filter { $0.hasPrefix("note ") }
    }

    /// Starts `notes watch` and waits for `ready`.
    func watch(sourceLocation: SourceLocation = #_sourceLocation) throws -> NotesProcess {
        let watch = try NotesProcess(arguments(["watch"]))
        let ready = watch.readLines(until: { $0 == "ready" }, timeout: .seconds(20))
        #expect(
            ready.found,
            "watch on \(name) never said ready: \(ready.lines) \(watch.standardError)",
            sourceLocation: sourceLocation
        )
        return watch
    }
}

/// The 8-digit id in an `added note ID ...` line.
func addedID(_ lines: [String]) -> String? {
    lines.first { $0.hasPrefix("added note ") }.map { String($0.dropFirst("added note ".count).prefix(8)) }
}

@Suite("The Notes sample, driven as a user would, across processes", .serialized)
struct NotesSampleTests {
    let directory = TemporaryDirectory("notes-sample")

    @Test("add, edit, list and delete on one device are seen by the other (SQLite and plist)")
    func editsTravel() throws {
        let laptop = NotesDevice("laptop", store: "sqlite", in: directory)
        let desktop = NotesDevice("desktop", store: "plist", in: directory)
        let id = try #require(addedID(try laptop.run(["add", "Groceries", "--body", "milk", "--tag", "home"])))
        let seen = try desktop.notes()
        #expect(seen == ["note \(id) folder=\"Inbox\" pinned=no tags=[home] title=\"Groceries\" body=\"milk\""])

        try desktop.run(["edit", id, "--body", "milk, \"eggs\"\nand bread", "--pin"])
        #expect(
            try laptop.notes() == [
                "note \(id) folder=\"Inbox\" pinned=yes tags=[home] title=\"Groceries\" body=\"milk, \\\"eggs\\\"\\nand bread\""
            ]
        )

        try laptop.run(["folder", "add", "Work"])
        try laptop.run(["edit", "Groceries", "--title", "Errands", "--folder", "Work", "--no-pin"])
        try laptop.run(["tag", id, "urgent"])
        try laptop.run(["tag", id, "home", "--remove"])
        let after = try desktop.notes()
        #expect(
            after == [
                "note \(id) folder=\"Work\" pinned=no tags=[urgent] title=\"Errands\" body=\"milk, \\\"eggs\\\"\\nand bread\""
            ]
        )
        #expect(try laptop.notes() == after)

        try laptop.run(["delete", id])
        #expect(try desktop.notes().isEmpty)
        let status = try desktop.run(["status"])
        #expect(status.contains("device desktop"))
        #expect(status.contains("state syncing"))
        #expect(
            status.contains { $0.hasPrefix("registered laptop") }
                && status.contains { $0.hasPrefix("registered desktop") }
        )
        #expect(status.contains { $0.hasPrefix("log laptop ") && $0.contains("applied of") })
    }

    @Test("two devices each create the settings singleton; after sync both keep the one created first")
    func settingsSingletonResolvesToOne() throws {
        let laptop = NotesDevice("laptop", store: "sqlite", in: directory)
        let desktop = NotesDevice("desktop", store: "json", in: directory)
        let first = try laptop.run(["settings", "--theme", "dark"], offline: true).filter { $0.hasPrefix("settings ") }
        let second = try desktop.run(["settings", "--sort", "title"], offline: true).filter {
            $0.hasPrefix("settings ")
        }
        #expect(first.count == 1 && second.count == 1 && first != second)

        try laptop.run(["sync"])
        let joined = try desktop.run(["sync"])
        #expect(joined.contains { $0.hasPrefix("- settings ") }, "the desktop's own settings lose: \(joined)")
        try laptop.run(["sync"])
        let laptopSettings = try laptop.run(["settings"]).filter { $0.hasPrefix("settings ") }
        let desktopSettings = try desktop.run(["settings"]).filter { $0.hasPrefix("settings ") }
        #expect(laptopSettings == first, "the earliest settings (the laptop's) win")
        #expect(desktopSettings == first)
        #expect(first.first?.contains("theme=dark") == true && first.first?.contains("created-on=laptop") == true)
    }

    @Test("a folder and a tag created on both devices under one name become one, keeping both devices' notes")
    func foldersAndTagsDeduplicate() throws {
        let laptop = NotesDevice("laptop", store: "sqlite", in: directory)
        let desktop = NotesDevice("desktop", store: "json", in: directory)
        try laptop.run(["sync"])
        try desktop.run(["sync"])
        for (device, title) in [(laptop, "one"), (desktop, "two")] {
            try device.run(["folder", "add", "Projects"], offline: true)
            try device.run(["add", title, "--folder", "Projects", "--tag", "later"], offline: true)
        }
        try laptop.run(["sync"])
        try desktop.run(["sync"])
        try laptop.run(["sync"])
        let notes = try laptop.notes()
        #expect(
            notes.count == 2 && notes.allSatisfy { $0.contains("folder=\"Projects\" pinned=no tags=[later]") },
            "\(notes)"
        )
        #expect(try desktop.notes() == notes)
        for device in [laptop, desktop] {
            #expect(
                try device.run(["folder", "list"]).filter { $0.hasPrefix("folder ") }
                    == ["folder \"Inbox\" notes=0", "folder \"Projects\" notes=2"]
            )
            #expect(try device.run(["status"]).contains("notes 2 folders 2 tags 1"))
        }
    }

    @Test(
        "a note filed into a folder another device deleted moves to the Inbox, on both devices",
        arguments: [true, false]
    )
    func folderClashIsRepaired(filingDeviceSyncsFirst: Bool) throws {
        let laptop = NotesDevice("laptop", store: "sqlite", in: directory)
        let desktop = NotesDevice("desktop", store: "json", in: directory)
        try laptop.run(["folder", "add", "Work"])
        try desktop.run(["sync"])
        // A folder with notes cannot be deleted on one device...
        let keep = try desktop.run(["add", "Keep", "--folder", "Work"])
        let refused = try NotesProcess.run(laptop.arguments(["folder", "delete", "Work"]))
        #expect(refused.status == 1 && refused.errors.contains("holds 1 note(s)"), "\(refused.errors)")
        try laptop.run(["delete", try #require(addedID(keep))])
        try desktop.run(["sync"])

        // ...but across devices, while both are offline, it can happen.
        try laptop.run(["folder", "delete", "Work"], offline: true)
        let id = try #require(addedID(try desktop.run(["add", "Report", "--folder", "Work"], offline: true)))
        let (first, second) = filingDeviceSyncsFirst ? (desktop, laptop) : (laptop, desktop)
        try first.run(["sync"])
        let repair = try second.run(["sync"])
        #expect(
            repair.contains { $0.hasPrefix("repaired note \(id)") && $0.hasSuffix("moved to \"Inbox\"") },
            "\(repair)"
        )
        try first.run(["sync"])

        let expected = ["note \(id) folder=\"Inbox\" pinned=no tags=[] title=\"Report\" body=\"\""]
        #expect(try laptop.notes() == expected)
        #expect(try desktop.notes() == expected)
        for device in [laptop, desktop] {
            #expect(
                try device.run(["folder", "list"]).filter { $0.hasPrefix("folder ") } == ["folder \"Inbox\" notes=1"]
            )
        }
    }

    @Test("watch prints a note another process adds, live, and says when the container is deleted")
    func watchSeesChangesLive() throws {
        let laptop = NotesDevice("laptop", store: "sqlite", in: directory)
        let desktop = NotesDevice("desktop", store: "json", in: directory)
        try laptop.run(["sync"])
        let watch = try desktop.watch()
        let id = try #require(addedID(try laptop.run(["add", "Live one", "--body", "hello"])))
        let arrival = watch.readLines(until: { $0.hasPrefix("+ note \(id)") }, timeout: .seconds(20))
        #expect(arrival.found, "the watcher did not see the note: \(arrival.lines)")
        #expect(arrival.lines.last?.contains("title=\"Live one\" body=\"hello\"") == true)

        try FileManager.default.removeItem(at: laptop.container)
        let reset = watch.readLines(until: { $0.hasPrefix("local notes:") }, timeout: .seconds(20))
        #expect(
            reset.found && reset.lines.contains { $0.hasPrefix("sync stopped:") },
            "no reset reported: \(reset.lines)"
        )
        #expect(reset.lines.last == "local notes: 1")
        #expect(watch.readLine(timeout: .seconds(10))?.hasPrefix("note \(id)") == true)

        watch.signal(SIGTERM)
        #expect(watch.readLines(until: { $0 == "stopped" }, timeout: .seconds(10)).found)
        #expect(watch.waitForExit(timeout: .seconds(10)) == 0)
        #expect(try desktop.notes().count == 1, "the local notes stay after the reset")
    }

    @Test("bad input fails with a message naming the problem, a non-zero status, and no crash")
    func badInputFailsClearly() throws {
        let data = directory.makeDirectory("bad")
        let unknown = try NotesProcess.run(["list", "--store", "xml", "--data", data.path])
        #expect(unknown.status != 0 && !unknown.crashed)
        #expect(unknown.errors.contains("xml") && unknown.errors.contains("sqlite"), "\(unknown.errors)")

        for (type, garbage) in [
            ("json", "{ this is not json"), ("sqlite", "not a database, just text"), ("plist", "bplist00 garbage"),
        ] {
            let file = data.appendingPathComponent("notes.\(type)")
            try Data(garbage.utf8).write(to: file)
            let outcome = try NotesProcess.run(["list", "--data", data.path])
            #expect(
                outcome.status == 1 && !outcome.crashed,
                "\(type): \(outcome.status.map(String.init) ?? "crashed") \(outcome.errors)"
            )
            #expect(outcome.errors.contains(file.path), "\(type): the message names the file: \(outcome.errors)")
            #expect(try Data(contentsOf: file) == Data(garbage.utf8), "\(type): a damaged store is never written")
            try FileManager.default.removeItem(at: file)
        }

        let missing = try NotesProcess.run([
            "edit", "nothing-like-this", "--title", "x", "--data", data.path, "--create",
        ])
        #expect(
            missing.status == 1 && missing.errors.contains("no note has the id or title \"nothing-like-this\""),
            "\(missing.errors)"
        )
        let noFolder = try NotesProcess.run(["add", "x", "--folder", "Nowhere", "--data", data.path])
        #expect(
            noFolder.status == 1 && noFolder.errors.contains("there is no folder \"Nowhere\""),
            "\(noFolder.errors)"
        )
    }
}
