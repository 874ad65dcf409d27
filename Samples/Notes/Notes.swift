import ArgumentParser
import Foundation

/// `notes`: a small notes app on Concord's public products. Each command is one launch of the
/// app: it opens the local store, syncs through the container when there is one, does its work,
/// saves, exports, and exits. Output is one line per fact, for people and for scripts.
@main
struct Notes: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notes",
        abstract: "Notes that sync through a shared folder (a Concord sample).",
        discussion: """
            Every command takes --store, --data, --container, --device and --offline after its \
            name, e.g. `notes add "Groceries" --data ~/notes --container ~/Sync/notes`.
            """,
        subcommands: [
            Add.self, Edit.self, List.self, Delete.self, Tag.self, Folder.self, Settings.self, Status.self, SyncNow.self,
            Watch.self, Demo.self,
        ]
    )
}

/// Where a store lives and how it syncs: the options every command takes.
struct GlobalOptions: ParsableArguments {
    @Option(help: "The store type: sqlite, json or plist (default: the one already in --data, else sqlite).")
    var store: StoreKind?

    @Option(help: "The folder of the local store (default: $NOTES_DATA, else ~/.local/share/concord-notes).")
    var data: String = ProcessInfo.processInfo.environment["NOTES_DATA"]
        ?? (NSHomeDirectory() + "/.local/share/concord-notes")

    @Option(help: "The shared folder to sync through; remembered, so later launches sync too.")
    var container: String?

    @Option(help: "This device's name in the container (used when the store first syncs).")
    var device: String?

    @Flag(help: "Do not sync this time: changes are kept and exported by the next launch that syncs.")
    var offline = false

    /// The store type: the one asked for, else the one already in the data folder, else SQLite.
    func storeKind() throws -> StoreKind {
        if let store { return store }
        let folder = URL(fileURLWithPath: data, isDirectory: true)
        let present = StoreKind.allCases.filter { FileManager.default.fileExists(atPath: $0.url(in: folder).path) }
        guard present.count <= 1 else {
            throw NotesError("\(folder.path) holds \(present.map(\.rawValue).joined(separator: " and ")) stores: choose one with --store")
        }
        return present.first ?? .sqlite
    }

    /// One launch: opens the store, syncs, runs `body` (which saves its own changes and returns
    /// its lines), exports, and closes; prints every line as it comes.
    func launch(_ body: (NotesLibrary) throws -> [String]) throws {
        let library = try NotesLibrary(options: self)
        defer { library.close() }
        for line in try library.startSync(offline: offline) { try say(line) }
        for line in try body(library) { try say(line) }
        for line in try library.finishSync(offline: offline) { try say(line) }
    }
}

/// The store types the app offers.
enum StoreKind: String, CaseIterable, ExpressibleByArgument {
    case sqlite, json, plist

    /// The store's file in `folder`.
    func url(in folder: URL) -> URL {
        folder.appendingPathComponent("notes.\(rawValue)", isDirectory: false)
    }
}
