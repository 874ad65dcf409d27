import ArgumentParser
import Foundation

/// `notes demo`: two devices (an SQLite store and a JSON store, each a separate `notes`
/// process) share one container folder, and the story of what each sees is told step by step.
/// Every wait is for a line a process prints, with a bound; nothing sleeps.
struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Two devices syncing notes through one folder, told step by step."
    )

    @Option(help: "Where to put the devices' stores and the container (default: a new temporary folder).")
    var directory: String?

    @Flag(help: "Keep the folder afterwards (it is removed by default).")
    var keep = false

    func run() throws {
        let folder =
            directory.map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? URL(fileURLWithPath: NSTemporaryDirectory(), isDirectory: true)
            .appendingPathComponent("concord-notes-demo-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let story = Story(folder: folder)
        defer {
            story.stopWatchers()
            if keep {
                try? say("\n(the demo's files are kept in \(folder.path))")
            } else {
                try? FileManager.default.removeItem(at: folder)
            }
        }
        try story.tell()
    }
}

/// One device of the demo: a name, a store type and a data folder.
struct DemoDevice {
    let name: String
    let store: StoreKind
    let data: URL
    /// The column the device's lines are printed under.
    var label: String { name.padding(toLength: 8, withPad: " ", startingAt: 0) }
}

/// The demo's steps, and the two devices they drive.
final class Story {
    let folder: URL
    let container: URL
    let laptop: DemoDevice
    let desktop: DemoDevice
    private var watchers: [NotesProcess] = []
    private let started = ContinuousClock.now

    init(folder: URL) {
        self.folder = folder
        container = folder.appendingPathComponent("container", isDirectory: true)
        laptop = DemoDevice(
            name: "laptop",
            store: .sqlite,
            data: folder.appendingPathComponent("laptop", isDirectory: true)
        )
        desktop = DemoDevice(
            name: "desktop",
            store: .json,
            data: folder.appendingPathComponent("desktop", isDirectory: true)
        )
    }

    func tell() throws {
        try say("Concord Notes demo, in \(folder.path)")
        try say("  laptop:    an SQLite store in laptop/")
        try say("  desktop:   a JSON store in desktop/")
        try say("  container/ is the shared folder (Syncthing, Dropbox or NFS would carry it between machines)")
        try say("  Each `notes` command below is a separate process: one launch of the app on that device.")

        // 1. Two first launches, before either device has synced.
        try step(1, "Each device is set up offline; on its first launch each creates its settings (a singleton)")
        try run(laptop, ["settings", "--theme", "dark"], offline: true)
        try run(desktop, ["settings", "--sort", "title"], offline: true)
        let groceries = try noteID(
            in: try run(laptop, ["add", "Groceries", "--body", "milk", "--tag", "home"], offline: true)
        )
        try run(laptop, ["folder", "add", "Work"], offline: true)
        try run(laptop, ["folder", "add", "Archive"], offline: true)

        // 2. Joining the container; the two settings become one.
        try step(2, "Both devices join the container; two settings records meet and one wins, the same on both")
        try run(laptop, ["sync"])
        try run(desktop, ["sync"])
        try run(laptop, ["sync"])
        let laptopSettings = try run(laptop, ["settings"]).filter { $0.hasPrefix("settings ") }
        let desktopSettings = try run(desktop, ["settings"]).filter { $0.hasPrefix("settings ") }
        let sameSettings = !laptopSettings.isEmpty && laptopSettings == desktopSettings
        try note(
            sameSettings
                ? "one settings record on both devices: the one created first (on the laptop) wins, by the singleton policy"
                : "the devices disagree about the settings!"
        )
        guard sameSettings else { throw NotesError("the settings did not converge") }

        // 3. Live sync.
        try step(3, "The desktop watches live; a note added on the laptop appears there at once")
        let watch = try startWatch(desktop)
        try run(laptop, ["add", "Call the plumber", "--folder", "Work", "--tag", "urgent"])
        let arrival = watch.readLines(
            until: { $0.hasPrefix("+ note") && $0.contains("Call the plumber") },
            timeout: .seconds(20)
        )
        for line in arrival.lines { try show(desktop, "| " + line) }
        guard arrival.found else { throw NotesError("the desktop never saw the laptop's note") }
        try stopWatch(watch, desktop)

        // 4. Concurrent edits while both are offline.
        try step(4, "Both edit the same note offline (different fields), and both tag it \"weekend\"")
        try run(laptop, ["edit", groceries, "--title", "Groceries for Sunday"], offline: true)
        try run(desktop, ["edit", groceries, "--body", "milk, eggs, coffee"], offline: true)
        try run(laptop, ["tag", groceries, "weekend"], offline: true)
        try run(desktop, ["tag", groceries, "weekend"], offline: true)
        try note("back online: each device syncs")
        try run(laptop, ["sync"])
        try run(desktop, ["sync"])
        try run(laptop, ["sync"])
        let merged = try run(desktop, ["list"]).filter { $0.contains("note \(groceries)") }
        try note(
            merged.first.map {
                $0.contains("Groceries for Sunday") && $0.contains("milk, eggs, coffee") && $0.contains("weekend")
            }
                == true
                ? "both edits kept (title from the laptop, text from the desktop); the two \"weekend\" tags became one"
                : "the edits did not merge as expected"
        )

        // 5. The validation clash.
        try step(5, "A clash: the laptop deletes the empty folder Archive while the desktop files a new note into it")
        try run(laptop, ["folder", "delete", "Archive"], offline: true)
        try run(desktop, ["add", "Tax return", "--folder", "Archive"], offline: true)
        try note("back online: the desktop syncs first, then the laptop, which now holds a note whose folder is gone")
        try run(desktop, ["sync"])
        let repair = try run(laptop, ["sync"])
        try note(
            repair.contains { $0.hasPrefix("repaired note") }
                ? "the laptop's save found the invalid note; the repair policy moved it to the Inbox (a synced edit)"
                : "no repair was reported"
        )
        try run(desktop, ["sync"])

        // 6. Convergence.
        try step(6, "Both devices list the same notes")
        let laptopNotes = try run(laptop, ["list"]).filter { $0.hasPrefix("note ") }
        let desktopNotes = try run(desktop, ["list"]).filter { $0.hasPrefix("note ") }
        let identical = laptopNotes == desktopNotes && !laptopNotes.isEmpty
        try note(identical ? "identical: \(laptopNotes.count) notes, line for line" : "the devices differ!")
        guard identical else { throw NotesError("the devices did not converge") }

        // 7. The container disappears.
        try step(7, "The container is deleted (moved to the trash and emptied) while the desktop watches")
        let resetWatch = try startWatch(desktop)
        let trash = folder.appendingPathComponent("trash", isDirectory: true)
        try say("   demo     $ mv container/ trash/ && rm -r trash/")
        try FileManager.default.moveItem(at: container, to: trash)
        try FileManager.default.removeItem(at: trash)
        let reset = resetWatch.readLines(until: { $0.hasPrefix("local notes:") }, timeout: .seconds(20))
        for line in reset.lines { try show(desktop, "| " + line) }
        guard reset.found, let count = reset.lines.last.flatMap({ Int($0.dropFirst("local notes: ".count)) }) else {
            throw NotesError("the desktop did not report the reset")
        }
        var kept: [String] = []
        for _ in 0..<count {
            guard let line = resetWatch.readLine(timeout: .seconds(10)) else { break }
            kept.append(line)
            try show(desktop, "| " + line)
        }
        try stopWatch(resetWatch, desktop)
        try note(
            kept == desktopNotes
                ? "sync stopped once, and every local note is still there"
                : "the desktop's notes changed after the reset!"
        )
        try run(laptop, ["status"])

        let elapsed = ContinuousClock.now - started
        try say(
            "\nDone in \(elapsed.components.seconds).\(String(format: "%01d", elapsed.components.attoseconds / 100_000_000_000_000_000)) s."
        )
    }

    // MARK: Running the devices

    private func arguments(_ device: DemoDevice, _ command: [String], offline: Bool) -> [String] {
        command + [
            "--store", device.store.rawValue, "--data", device.data.path, "--container", container.path, "--device",
            device.name,
        ]
            + (offline ? ["--offline"] : [])
    }

    /// Runs one command on `device`, printing it and its output; throws if it fails.
    @discardableResult
    private func run(_ device: DemoDevice, _ command: [String], offline: Bool = false) throws -> [String] {
        try say(
            "   \(device.label) $ notes \(command.map(Self.shellWord).joined(separator: " "))\(offline ? " --offline" : "")"
        )
        let result = try NotesProcess.run(arguments(device, command, offline: offline), timeout: .seconds(30))
        for line in result.lines { try show(device, "| " + line) }
        // Sync's status lines (standard error), after the data lines.
        for line in result.errors.split(separator: "\n") where !line.isEmpty { try show(device, ": " + line) }
        guard result.status == 0 else {
            throw NotesError(
                "`notes \(command.joined(separator: " "))` on the \(device.name) failed (\(result.status.map { "status \($0)" } ?? "killed")): \(result.errors)"
            )
        }
        return result.lines
    }

    private func startWatch(_ device: DemoDevice) throws -> NotesProcess {
        try say("   \(device.label) $ notes watch &")
        let watch = try NotesProcess(arguments(device, ["watch"], offline: false))
        watchers.append(watch)
        let ready = watch.readLines(until: { $0 == "ready" }, timeout: .seconds(20))
        for line in ready.lines { try show(device, "| " + line) }
        guard ready.found else {
            throw NotesError("`notes watch` on the \(device.name) did not start: \(watch.standardError)")
        }
        return watch
    }

    private func stopWatch(_ watch: NotesProcess, _ device: DemoDevice) throws {
        try say("   \(device.label) $ kill -TERM %watch")
        watch.signal(SIGTERM)
        let end = watch.readLines(until: { $0 == "stopped" }, timeout: .seconds(10))
        for line in end.lines { try show(device, "| " + line) }
        guard watch.waitForExit(timeout: .seconds(10)) == 0 else {
            throw NotesError("`notes watch` on the \(device.name) did not stop cleanly: \(watch.standardError)")
        }
        watchers.removeAll { $0 === watch }
    }

    func stopWatchers() {
        for watch in watchers {
            watch.signal(SIGTERM)
            _ = watch.waitForExit(timeout: .seconds(10))
        }
        watchers = []
    }

    // MARK: Printing

    private func step(_ number: Int, _ title: String) throws { try say("\n\(number). \(title)") }
    private func note(_ text: String) throws { try say("   ->       \(text)") }
    private func show(_ device: DemoDevice, _ line: String) throws { try say("   \(device.label) \(line)") }

    /// The id in an `added note ID ...` line.
    private func noteID(in lines: [String]) throws -> String {
        guard let line = lines.first(where: { $0.hasPrefix("added note ") }) else {
            throw NotesError("no note was added")
        }
        return String(line.dropFirst("added note ".count).prefix(8))
    }

    private static func shellWord(_ word: String) -> String {
        word.contains(where: { " ,\"'".contains($0) }) ? "\"\(word)\"" : word
    }
}
