import ArgumentParser
import FileCoordination
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
            Every command takes --store, --data, --create, --container, --device, --offline and \
            --read-only after its name, e.g. `notes add "Groceries" --data ~/notes --container ~/Sync/notes`. \
            A store is created only when asked: --create, or a first launch with --container. \
            Data lines go to standard output; sync's status and progress to standard error.
            """,
        version: notesVersion,
        subcommands: [
            Add.self, Fill.self, Edit.self, List.self, Delete.self, Tag.self, Folder.self, Settings.self, Status.self,
            SyncNow.self,
            Watch.self, Demo.self,
        ]
    )
}

/// Where a store lives and how it syncs: the options every command takes.
struct GlobalOptions: ParsableArguments {
    @Option(help: "The store type: sqlite, json or plist (default: the one already in --data, else sqlite).")
    var store: StoreKind?

    @Option(help: "The folder of the local store (default: $NOTES_DATA, else ~/.local/share/concord-notes).")
    var data: String =
        ProcessInfo.processInfo.environment["NOTES_DATA"]
        ?? (NSHomeDirectory() + "/.local/share/concord-notes")

    @Flag(help: "Create the store (and the data folder) if there is none; without it, a missing store is an error.")
    var create = false

    @Option(
        help:
            "The shared folder to sync through; remembered, so later launches sync too. Naming one creates the store if there is none."
    )
    var container: String?

    @Option(help: "This device's name in the container (used when the store first syncs).")
    var device: String?

    @Flag(help: "Do not sync this time: changes are kept and exported by the next launch that syncs.")
    var offline = false

    @Flag(
        help:
            "Open the store read-only (also in a read-only folder): nothing is written, not even by sync, which stays off; a command that saves fails."
    )
    var readOnly = false

    /// The data folder.
    var dataFolder: URL { URL(fileURLWithPath: data, isDirectory: true).standardizedFileURL }

    /// Whether this launch may create a store: `--create`, or a container named (its first use
    /// joins it, so the store is made to receive what other devices wrote).
    var mayCreate: Bool { !readOnly && (create || container != nil) }

    /// The store type: the one already in the data folder, else the one asked for, else SQLite.
    ///
    /// - Throws: ``NotesError`` when `--store` names another type than the store already in the
    ///   data folder (a second, empty store would hide the first), when the folder holds stores
    ///   of several types, and when there is no store and this launch may not create one (a
    ///   mistyped `--data`). Nothing is created on disk before these checks pass.
    func storeKind() throws -> StoreKind {
        let folder = dataFolder
        let present = StoreKind.allCases.filter { FileManager.default.fileExists(atPath: $0.url(in: folder).path) }
        guard present.count <= 1 else {
            throw NotesError(
                "\(folder.path) holds \(present.map(\.rawValue).joined(separator: " and ")) stores: remove the one you do not use"
            )
        }
        if let existing = present.first {
            if let store, store != existing {
                throw NotesError(
                    "the data folder \(folder.path) holds a \(existing.rawValue) store, not a \(store.rawValue) one: "
                        + "leave out --store \(store.rawValue) (or give --store \(existing.rawValue)), or choose another --data folder"
                )
            }
            return existing
        }
        guard mayCreate else {
            let what =
                FileManager.default.fileExists(atPath: folder.path)
                ? "there is no notes store in \(folder.path)" : "there is no data folder \(folder.path)"
            throw NotesError(
                "\(what): check --data (or $NOTES_DATA), or create a store with --create (or join a shared folder with --container)"
            )
        }
        return store ?? .sqlite
    }

    /// One launch: opens the store, syncs, runs `body` (which saves its own changes and returns
    /// its lines), exports, and closes; prints every line as it comes.
    /// Data lines (records, what a command did) go to standard output; sync's status lines and
    /// warnings to standard error, so `notes list | …` sees only notes.
    func launch(renamingDevice: Bool = false, _ body: (NotesLibrary) throws -> [String]) throws {
        let library = try NotesLibrary(options: self, renamingDevice: renamingDevice)
        defer { library.close() }
        for line in try library.startSync(offline: offline) { try line.print() }
        for line in try body(library) { try say(line) }
        for line in try library.finishSync(offline: offline) { try line.print() }
    }
}

/// The sample's version (`notes --version`): Concord's.
let notesVersion = Concord.version

/// The store types the app offers.
enum StoreKind: String, CaseIterable, ExpressibleByArgument {
    case sqlite, json, plist

    /// The store's file in `folder`.
    func url(in folder: URL) -> URL {
        folder.appendingPathComponent("notes.\(rawValue)", isDirectory: false)
    }
}
