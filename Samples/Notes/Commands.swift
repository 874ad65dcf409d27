import ArgumentParser
import FolderSync
import Foundation
import Persistence

/// Saves `context`, turning a failure into a message that says what was refused.
@discardableResult
func save(_ context: ObjectContext) throws -> ChangeSet {
    do {
        return try context.save()
    } catch let error as PersistenceError where error.reason == .commitUnconfirmed {
        throw NotesError("the save's outcome is not known: \(error)")
    } catch let error as PersistenceError {
        throw NotesError("the save failed: \(error)")
    }
}

struct Add: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Add a note.")

    @OptionGroup var options: GlobalOptions
    @Argument(help: "The note's title.") var title: String
    @Option(help: "The note's text.") var body = ""
    @Option(help: "The folder to file it in (default: Inbox).") var folder = NotesModel.inboxName
    @Option(name: .customLong("tag"), help: "A tag (repeat for more).") var tags: [String] = []
    @Flag(help: "Pin the note.") var pin = false

    func run() throws {
        try options.launch { library in
            let context = library.context("notes add")
            guard let folder = try library.folder(named: folder, in: context) else {
                throw NotesError("there is no folder \(NotesModel.quoted(folder)) (create it with `notes folder add`)")
            }
            let now = Date()
            var note = try context.insert(
                entity: "Note",
                values: [
                    "title": .string(title), "body": .string(body), "created": .date(now), "edited": .date(now),
                    "pinned": .boolean(pin),
                ]
            )
            note.toOne["folder"] = folder.id
            for label in tags { note.toMany["tags", default: []].insert(try library.tag(label, in: context).id) }
            try context.update(note)
            try save(context)
            return ["added " + (try library.describe(note, in: library.context("notes show")))]
        }
    }
}

/// Adds many generated notes, to try the app (and sync) at scale.
struct Fill: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Add COUNT generated notes (\"note 1\", \"note 2\", ...), saved 1,000 at a time: the app at scale."
    )

    @OptionGroup var options: GlobalOptions
    @Argument(help: "How many notes to add.") var count: Int
    @Option(help: "The folder to file them in (default: Inbox).") var folder = NotesModel.inboxName

    func validate() throws {
        guard count > 0 else { throw ValidationError("COUNT must be at least 1") }
    }

    func run() throws {
        try options.launch { library in
            guard let target = try library.folder(named: folder, in: library.context("notes fill"))?.id else {
                throw NotesError("there is no folder \(NotesModel.quoted(folder)) (create it with `notes folder add`)")
            }
            var added = 0
            while added < count {
                // One save per batch: memory stays bounded, and each batch is one log with sync.
                let context = library.context("notes fill")
                let now = Date()
                for _ in 0..<min(1_000, count - added) {
                    added += 1
                    var note = try context.insert(
                        entity: "Note",
                        values: [
                            "title": .string("note \(added)"), "body": .string(""), "created": .date(now),
                            "edited": .date(now), "pinned": .boolean(false),
                        ]
                    )
                    note.toOne["folder"] = target
                    try context.update(note)
                }
                try save(context)
                complain("notes: added \(added) of \(count)")
            }
            return ["added \(count) note(s) to \(NotesModel.quoted(folder))"]
        }
    }
}

struct Edit: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Change a note's title, text, folder or pin.")

    @OptionGroup var options: GlobalOptions
    @Argument(help: "The note: its id (or the start of it, as `list` prints it) or its title.") var note: String
    @Option(help: "A new title.") var title: String?
    @Option(help: "A new text.") var body: String?
    @Option(help: "Move it to this folder.") var folder: String?
    @Flag(inversion: .prefixedNo, help: "Pin or unpin it.") var pin: Bool?

    func validate() throws {
        guard title != nil || body != nil || folder != nil || pin != nil else {
            throw ValidationError("say what to change: --title, --body, --folder, --pin or --no-pin")
        }
    }

    func run() throws {
        try options.launch { library in
            let context = library.context("notes edit")
            let record = try library.note(note, in: context)
            // Exactly the fields the user named are written, even where this device already shows
            // that value: with sync, this edit is then newer than any other device's older one.
            if let title { try context.setValue(.string(title), forKey: "title", of: record.id) }
            if let body { try context.setValue(.string(body), forKey: "body", of: record.id) }
            if let pin { try context.setValue(.boolean(pin), forKey: "pinned", of: record.id) }
            if let folder {
                guard let target = try library.folder(named: folder, in: context) else {
                    throw NotesError("there is no folder \(NotesModel.quoted(folder))")
                }
                try context.setTarget(target.id, forKey: "folder", of: record.id)
            }
            try context.setValue(.date(Date()), forKey: "edited", of: record.id)
            try save(context)
            let updated = try library.context("notes show").record(with: record.id) ?? record
            return ["edited " + (try library.describe(updated, in: library.context("notes show")))]
        }
    }
}

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the notes, one line each, in the settings' order.")

    @OptionGroup var options: GlobalOptions
    @Option(help: "Only the notes of this folder.") var folder: String?

    func run() throws {
        try options.launch { library in
            let context = library.context("notes list")
            var folderID: ObjectID?
            if let folder {
                guard let record = try library.folder(named: folder, in: context) else {
                    throw NotesError("there is no folder \(NotesModel.quoted(folder))")
                }
                folderID = record.id
            }
            return try library.notes(in: context, folder: folderID).map(library.describer(in: context))
        }
    }
}

struct Delete: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Delete a note.")

    @OptionGroup var options: GlobalOptions
    @Argument(help: "The note: its id (or the start of it) or its title.") var note: String

    func run() throws {
        try options.launch { library in
            let context = library.context("notes delete")
            let record = try library.note(note, in: context)
            try context.delete(record.id)
            try save(context)
            return [
                "deleted note \(NotesModel.shortID(record.id)) title=\(NotesModel.quoted(NotesModel.string(record["title"])))"
            ]
        }
    }
}

struct Tag: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Tag a note (or remove tags with --remove).")

    @OptionGroup var options: GlobalOptions
    @Argument(help: "The note: its id (or the start of it) or its title.") var note: String
    @Argument(help: "The tags.") var labels: [String]
    @Flag(help: "Remove these tags instead.") var remove = false

    func run() throws {
        try options.launch { library in
            let context = library.context("notes tag")
            let record = try library.note(note, in: context)
            // Exactly the tags the user named are written (added or removed), even where this
            // device already shows them so; the note's other tags are not touched.
            for label in labels {
                if remove {
                    let tags = try context.fetch(
                        FetchRequest(entity: "Tag", predicate: Field("label") == .string(label))
                    )
                    try context.removeTargets(Set(tags.map(\.id)), forKey: "tags", of: record.id)
                } else {
                    try context.addTargets([try library.tag(label, in: context).id], forKey: "tags", of: record.id)
                }
            }
            try save(context)
            let updated = try library.context("notes show").record(with: record.id) ?? record
            return ["tagged " + (try library.describe(updated, in: library.context("notes show")))]
        }
    }
}

struct Folder: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Add, delete or list folders.",
        subcommands: [AddFolder.self, DeleteFolder.self, ListFolders.self],
        defaultSubcommand: ListFolders.self
    )

    struct AddFolder: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "add", abstract: "Add a folder.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The folder's name.") var name: String

        func run() throws {
            try options.launch { library in
                let context = library.context("notes folder add")
                guard try library.folder(named: name, in: context) == nil else {
                    throw NotesError("there is already a folder \(NotesModel.quoted(name))")
                }
                try context.insert(entity: "Folder", values: ["name": .string(name), "created": .date(Date())])
                try save(context)
                return ["added folder \(NotesModel.quoted(name))"]
            }
        }
    }

    struct DeleteFolder: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete an empty folder.")
        @OptionGroup var options: GlobalOptions
        @Argument(help: "The folder's name.") var name: String

        func run() throws {
            try options.launch { library in
                let context = library.context("notes folder delete")
                guard let folder = try library.folder(named: name, in: context) else {
                    throw NotesError("there is no folder \(NotesModel.quoted(name))")
                }
                guard folder.id != NotesModel.inboxID else {
                    throw NotesError(
                        "the Inbox cannot be deleted: notes whose folder is deleted on another device move there"
                    )
                }
                let count = folder.toMany["notes"]?.count ?? 0
                guard count == 0 else {
                    throw NotesError(
                        "the folder \(NotesModel.quoted(name)) holds \(count) note(s): move or delete them first"
                    )
                }
                try context.delete(folder.id)
                try save(context)
                return ["deleted folder \(NotesModel.quoted(name))"]
            }
        }
    }

    struct ListFolders: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the folders.")
        @OptionGroup var options: GlobalOptions

        func run() throws {
            try options.launch { library in
                let context = library.context("notes folder list")
                return try context.fetch(FetchRequest(entity: "Folder", sortedBy: [.ascending("name")])).map { folder in
                    "folder \(NotesModel.quoted(NotesModel.string(folder["name"]))) notes=\(folder.toMany["notes"]?.count ?? 0)"
                }
            }
        }
    }
}

struct Settings: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the settings, or change them.")

    @OptionGroup var options: GlobalOptions
    @Option(help: "The theme (any name: light, dark, ...).") var theme: String?
    @Option(help: "How `list` orders notes: edited, title or created.") var sort: String?

    func validate() throws {
        if let sort, NotesModel.SortOrder(rawValue: sort) == nil {
            throw ValidationError("--sort must be edited, title or created, not \(NotesModel.quoted(sort))")
        }
    }

    func run() throws {
        try options.launch { library in
            let context = library.context("notes settings")
            guard let settings = try library.settings(in: context) else {
                throw NotesError("the store has no settings record")
            }
            if theme != nil || sort != nil {
                // The settings the user named are written even where they already hold that value.
                if let theme { try context.setValue(.string(theme), forKey: "theme", of: settings.id) }
                if let sort { try context.setValue(.string(sort), forKey: "sortOrder", of: settings.id) }
                try save(context)
            }
            return [NotesModel.describeSettings(try library.settings(in: library.context("notes show")) ?? settings)]
        }
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the store, the device and sync's state.")

    @OptionGroup var options: GlobalOptions

    func run() throws {
        try options.launch { library in
            let context = library.context("notes status")
            var lines = [
                "store \(library.kind.rawValue) \(library.store.url.path)",
                "notes \(try context.count(for: FetchRequest(entity: "Note"))) folders \(try context.count(for: FetchRequest(entity: "Folder"))) tags \(try context.count(for: FetchRequest(entity: "Tag")))",
            ]
            guard let sync = library.sync else {
                lines.append("sync off: no container (give one with --container)")
                return lines
            }
            lines.append("device \(sync.deviceID)")
            lines.append("container \(sync.layout.container.path) (\(sync.containerAvailability))")
            lines.append("state \(options.offline ? "offline (this launch)" : sync.state.description)")
            lines.append("log \(sync.deviceID) \(try sync.lastLocalSequence()) (this device's last)")
            // The store against its own sync history: a mismatch is a divergence no log repairs.
            let mismatch = try sync.historyMismatches()
            lines.append(mismatch.isEmpty ? "history in step with the store" : "history mismatch: \(mismatch)")
            if sync.containerAvailability == .available {
                let contents = try sync.sentinel.contents()
                for registration in contents.registrations {
                    let host = registration.host.map { " host=\($0)" } ?? ""
                    lines.append(
                        "registered \(registration.device)\(host) since=\(NotesModel.timestamp(.date(registration.registered)))"
                    )
                }
                for problem in contents.problems { lines.append("sentinel problem: \(problem)") }
                let others =
                    ((try? FileManager.default.contentsOfDirectory(atPath: sync.layout.devicesFolder.path)) ?? [])
                    .filter { $0 != sync.deviceID && !$0.hasPrefix(".") }.sorted()
                for device in others {
                    let available = (try? sync.layout.logSequences(device: device))?.max() ?? 0
                    lines.append("log \(device) \(try sync.importedThrough(device: device)) applied of \(available)")
                }
            }
            return lines
        }
    }
}

struct SyncNow: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Sync once: join the container, import what is there, export, exit."
    )

    @OptionGroup var options: GlobalOptions

    @Flag(
        help: """
            First give this store a new device id (--device, or a random one), keeping its notes: \
            for a copy whose sync stopped because another machine syncs under its id.
            """
    )
    var newDeviceID = false

    func validate() throws {
        guard !options.offline else { throw ValidationError("`sync` cannot be --offline") }
    }

    func run() throws {
        try options.launch(renamingDevice: newDeviceID) { library in
            guard let sync = library.sync else {
                throw NotesError("no container to sync with: give one with --container")
            }
            guard sync.state == .syncing else {
                throw NotesError("cannot sync through \(sync.layout.container.path): sync is \(sync.state)")
            }
            return []
        }
    }
}
