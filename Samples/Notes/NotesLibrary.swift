import FolderSync
import Foundation
import JSONStore
import Persistence
import PlistStore
import SQLiteStore
import Synchronization

/// One launch of the app: the local store, opened with the Notes schema and policies, and,
/// when the store has a container, folder sync.
///
/// Every command is one launch: it opens the store, enables sync (which imports what other
/// devices wrote), does its work, saves, exports, and closes.
final class NotesLibrary: Sendable {
    let coordinator: StoreCoordinator
    let store: any PersistentStore
    let kind: StoreKind
    /// Sync, when a container is known (given now, or remembered from an earlier launch).
    let sync: FolderSync?
    /// What imports changed and this launch has not reported and settled yet (see ``settle()``).
    private let arrivals = Locked<[ChangeSet]>([])
    /// Called after each import's save (on sync's queue; it must not block).
    private let arrivalHandler = Locked<(@Sendable () -> Void)?>(nil)
    private let saveListener: UInt64
    /// Shows long joins and imports (standard error), while sync is set up.
    private let progress: ProgressReporter?

    /// The container, remembered in the store's metadata so that later launches sync too
    /// (a save made without sync set up would never be exported).
    static let containerKey = "notes.container"

    /// Opens (or creates) the store in `options.data` and sets up sync if there is a container.
    /// Sync is not enabled yet: ``startSync()`` does that. With `renamingDevice`, the store first
    /// takes a new device id (`options.device`, or a random one): a copy of a store whose sync
    /// stopped because another machine syncs under its id goes on under the new one.
    init(options: GlobalOptions, renamingDevice: Bool = false) throws {
        let data = options.dataFolder
        // Refuses a wrong --store and a missing store it may not create before anything is made.
        kind = try options.storeKind()
        if !options.readOnly {
            do {
                try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
            } catch {
                throw NotesError("cannot create the data folder \(data.path): \(error.localizedDescription)")
            }
        }
        let registry = StoreRegistry.shared
        registry.register(SQLiteStore.self)
        registry.register(JSONStore.self)
        registry.register(PlistStore.self)
        coordinator = StoreCoordinator(schema: NotesModel.schema, registry: registry)
        NotesModel.registerPolicies(on: coordinator)
        let url = kind.url(in: data)
        do {
            store = try coordinator.addStore(
                ofType: kind.rawValue,
                at: url,
                options: StoreOptions(isReadOnly: options.readOnly)
            )
        } catch {
            throw NotesError(
                "cannot open the \(kind.rawValue) store \(url.path)\(options.readOnly ? " read-only" : ""): \(error)"
            )
        }
        // A change the system could not confirm on disk is saved all the same: said, not failed.
        _ = store.events.addListener { event in
            guard case .durabilityUnconfirmed(let cause) = event.kind else { return }
            complain(
                "warning: the change is saved in \(event.url.path), but the system could not confirm it is on disk "
                    + "(\(cause)); do not repeat it: a power cut may undo it"
            )
        }

        let remembered = try store.metadataEntries(forKeys: [Self.containerKey])[Self.containerKey]
            .map { String(decoding: $0, as: UTF8.self) }
        let container =
            options.container.map { URL(fileURLWithPath: $0, isDirectory: true).standardizedFileURL.path } ?? remembered
        if options.readOnly {
            if renamingDevice { throw NotesError("a store opened read-only cannot take a new device id") }
            // Nothing may write the store: sync (which records what it imports) stays off.
            if container != nil {
                complain("notes: opened read-only: not syncing; a later launch without --read-only syncs")
            }
            sync = nil
            progress = nil
            saveListener = coordinator.addSaveListener { _ in }
            return
        }
        if renamingDevice {
            guard container != nil else { throw NotesError("no container to sync with: give one with --container") }
            let device: String
            do {
                device = try FolderSync.assignNewDeviceID(options.device, to: store)
            } catch {
                throw NotesError("cannot give the store a new device id: \(error)")
            }
            complain("notes: this store is now device \(device); its notes go out under that name")
        }
        if let container {
            if container != remembered {
                // A container named for the first time is created; one that was there before and
                // is gone is not (it may be on a volume not mounted, or reset: sync says which).
                do {
                    try FileManager.default.createDirectory(atPath: container, withIntermediateDirectories: true)
                } catch {
                    throw NotesError("cannot create the container \(container): \(error.localizedDescription)")
                }
                try store.commit(StoreChanges(metadataEntries: [Self.containerKey: Data(container.utf8)]))
            }
            sync = try FolderSync(
                coordinator: coordinator,
                store: store,
                container: URL(fileURLWithPath: container, isDirectory: true),
                storeName: "notes",
                deviceID: options.device,
                settleInterval: .milliseconds(500)
            )
            if let device = options.device, device != sync?.deviceID, !renamingDevice {
                complain(
                    "notes: warning: this store is already device \(sync!.deviceID); --device \(device) is ignored"
                )
            }
        } else {
            sync = nil
        }
        progress = sync.map { ProgressReporter(sync: $0) }

        // Imports: kept for the report and for settling.
        let arrivals = self.arrivals
        let handler = self.arrivalHandler
        saveListener = coordinator.addSaveListener { changes in
            guard changes.origin == .import, !changes.isEmpty else { return }
            arrivals.withLock { $0.append(changes) }
            handler.withLock { $0 }?()
        }
        try ensureDefaults(device: sync?.deviceID ?? options.device ?? ProcessInfo.processInfo.hostName)
    }

    /// Calls `handler` after each import's save (on sync's queue; it must not block).
    func onArrival(_ handler: @escaping @Sendable () -> Void) {
        arrivalHandler.withLock { $0 = handler }
    }

    /// The device id sync uses (`nil` without a container).
    var deviceID: String? { sync?.deviceID }

    /// First launch: the Inbox (the same record on every device) and the settings (one per
    /// device until sync meets them: then the one created first wins everywhere).
    private func ensureDefaults(device: String) throws {
        let context = ObjectContext(coordinator: coordinator, name: "notes defaults")
        // (Counted, not read: the Inbox holds every unfiled note, and a launch needs none of them.)
        if try context.count(for: FetchRequest(entity: "Folder", predicate: .ids([NotesModel.inboxID]))) == 0 {
            try context.insert(NotesModel.newInbox())
        }
        if try context.count(for: FetchRequest(entity: "Settings")) == 0 {
            try context.insert(entity: "Settings", values: ["created": .date(Date()), "createdOn": .string(device)])
        }
        if context.hasChanges { try context.save() }
    }

    // MARK: Sync

    /// Enables sync (joining the container, importing what other devices wrote) and waits for
    /// the import; then settles what arrived. Returns the lines to report. Without a container,
    /// or `offline`, does nothing: saves keep their history for the next launch that syncs. If
    /// sync cannot start, says why and leaves it off for this launch.
    func startSync(offline: Bool) throws -> [ReportLine] {
        guard let sync, !offline else { return [] }
        let events = EventLog(sync)
        defer { events.stop() }
        let state: SyncState
        do {
            state = try sync.enable().state
        } catch {
            // Local work goes on: the saves keep their history for the next launch that syncs.
            return events.lines().map(ReportLine.status) + [
                .status(
                    "sync warning: sync could not start: \(error); this launch works offline: "
                        + "a change it saves is kept for a later launch that syncs"
                )
            ]
        }
        sync.waitForQueuedWork()
        var lines = events.lines().map(ReportLine.status)
        if case .waitingForContainer(let availability) = state {
            lines.append(
                .status(
                    "sync waiting: the container \(sync.layout.container.path) is \(availability); changes are kept for later"
                )
            )
        }
        lines += try settle().map(ReportLine.data)
        return lines
    }

    /// Writes this launch's saves into the container and waits for sync's queued work; returns
    /// the lines to report.
    ///
    /// A save that committed is never reported as a failure because its export failed (the
    /// container full, read-only or gone): the store's outbox keeps it, a warning says so, and
    /// the next launch that syncs exports it. Only the export's ``SyncError`` is caught here;
    /// anything else still ends the command.
    func finishSync(offline: Bool) throws -> [ReportLine] {
        guard let sync, !offline, sync.state == .syncing else { return [] }
        let events = EventLog(sync)
        defer { events.stop() }
        var failure: SyncError?
        sync.waitForQueuedWork()
        failure = try failure ?? exportKeepingFailure(sync)
        // A repair made while settling is a save like any other: export it too.
        let repairs = try settle()
        sync.waitForQueuedWork()
        failure = try failure ?? exportKeepingFailure(sync)
        var lines = events.lines().map(ReportLine.status) + repairs.map(ReportLine.data)
        if let failure {
            lines.append(.status(Self.exportWarning(failure, store: store.url, container: sync.layout.container)))
        }
        return lines
    }

    /// Exports the outbox; returns the export's ``SyncError`` (writing into the container
    /// failed) instead of throwing it. Any other error (the store cannot be read) is thrown.
    private func exportKeepingFailure(_ sync: FolderSync) throws -> SyncError? {
        do {
            try sync.exportPending()
            return nil
        } catch let error as SyncError {
            return error
        }
    }

    /// The warning for a save that committed but was not exported.
    static func exportWarning(_ error: SyncError, store: URL, container: URL) -> String {
        "sync warning: the change is saved in \(store.path) and kept for later sync: "
            + "the export to \(container.path) failed (\(error)); the next launch that syncs exports it"
    }

    /// After imports: reports what arrived (a line per record: ``describeArrival(_:in:)``), then
    /// makes a local save that validates what other devices changed, so that entity policies
    /// repair what the merge left invalid (a note filed into a folder another device deleted
    /// moves to the Inbox; a line per repair). The repair is a local edit: sync exports it.
    /// A save with nothing else to commit still validates what imports left for it.
    func settle() throws -> [String] {
        let arrived = arrivals.withLock { pending in
            defer { pending = [] }
            return pending
        }
        var lines: [String] = []
        let reader = context("notes arrivals")
        for changes in arrived { lines += try describeArrival(changes, in: reader) }
        let context = context("notes settle")
        let changes = try save(context)
        for note in changes.updated
        where note.id.entity == "Note" && changes.updatedKeys[note.id]?.contains("folder") == true {
            let folder = try note.toOne["folder"].flatMap { try context.record(with: $0) }
            lines.append(
                "repaired note \(NotesModel.shortID(note.id)) title=\(NotesModel.quoted(NotesModel.string(note["title"]))): "
                    + "its folder was deleted on another device; moved to \(NotesModel.quoted(NotesModel.string(folder?["name"] ?? .null)))"
            )
        }
        return lines
    }

    /// A line per record an import inserted, updated or deleted: `+ `, `~ ` or `- ` and the
    /// record (its state now, read through `context`).
    func describeArrival(_ changes: ChangeSet, in context: ObjectContext) throws -> [String] {
        var lines: [String] = []
        // (Each folder and tag read once, not once per note that arrived.)
        let note = describer(in: context)
        func describeRecord(_ record: Record, in context: ObjectContext) throws -> String {
            try self.describeRecord(record, in: context, note: note)
        }
        for record in changes.inserted {
            lines.append("+ " + (try describeRecord(try context.record(with: record.id) ?? record, in: context)))
        }
        for record in changes.updated {
            // The derived sides (a folder's or a tag's notes) follow the notes: not news.
            let keys = (changes.updatedKeys[record.id] ?? []).subtracting(record.id.entity == "Note" ? [] : ["notes"])
            guard !keys.isEmpty else { continue }
            lines.append(
                "~ " + (try describeRecord(try context.record(with: record.id) ?? record, in: context))
                    + " changed=[\(keys.sorted().joined(separator: ","))]"
            )
        }
        for id in changes.deleted {
            let note = ["Settings", "Tag"].contains(id.entity) ? " (a duplicate: one is kept on every device)" : ""
            lines.append("- \(id.entity.lowercased()) \(NotesModel.shortID(id))\(note)")
        }
        return lines
    }

    /// One record as a line: a note as `list` prints it, the settings as `settings` does.
    func describeRecord(_ record: Record, in context: ObjectContext) throws -> String {
        try describeRecord(record, in: context, note: describer(in: context))
    }

    /// ``describeRecord(_:in:)``, a note described by `note`.
    private func describeRecord(
        _ record: Record,
        in context: ObjectContext,
        note: (Record) throws -> String
    ) throws -> String {
        switch record.id.entity {
        case "Note": return try note(record)
        case "Settings": return NotesModel.describeSettings(record)
        case "Folder":
            return
                "folder \(NotesModel.shortID(record.id)) name=\(NotesModel.quoted(NotesModel.string(record["name"])))"
        case "Tag":
            return "tag \(NotesModel.shortID(record.id)) label=\(NotesModel.quoted(NotesModel.string(record["label"])))"
        default: return "\(record.id.entity.lowercased()) \(NotesModel.shortID(record.id))"
        }
    }

    /// Stops sync and closes the store.
    func close() {
        if let sync {
            sync.stop()
            sync.waitForQueuedWork()
        }
        progress?.finish()
        coordinator.removeSaveListener(saveListener)
        coordinator.removeStore(store)
    }

    // MARK: Queries

    /// A context for this launch's edits (origin `.local`).
    func context(_ name: String) -> ObjectContext { ObjectContext(coordinator: coordinator, name: name) }

    /// The settings record (the earliest created, as the singleton policy keeps).
    func settings(in context: ObjectContext) throws -> Record? {
        try context.fetch(FetchRequest(entity: "Settings", sortedBy: [.ascending("created")])).first
    }

    /// The notes in the settings' order (pinned first), optionally of one folder.
    func notes(in context: ObjectContext, folder: ObjectID? = nil) throws -> [Record] {
        let order =
            (try settings(in: context)).flatMap { NotesModel.SortOrder(rawValue: NotesModel.string($0["sortOrder"])) }
            ?? .edited
        let sort: RecordSort
        switch order {
        case .edited: sort = .descending("edited")
        case .title: sort = .ascending("title")
        case .created: sort = .ascending("created")
        }
        let predicate: RecordPredicate = folder.map { Field("folder").refers(to: $0) } ?? .constant(true)
        return try context.fetch(
            FetchRequest(entity: "Note", predicate: predicate, sortedBy: [.descending("pinned"), sort])
        )
    }

    /// The `list` line of `note`.
    func describe(_ note: Record, in context: ObjectContext) throws -> String {
        try describe(note) { try context.record(with: $0) }
    }

    /// A function that makes the `list` line of a note read through `context`, reading each
    /// folder and tag once: a folder's record carries every note filed into it, so reading it
    /// again for each of its notes made listing N notes cost N² (10,000 notes took seconds).
    func describer(in context: ObjectContext) -> (Record) throws -> String {
        var read: [ObjectID: Record?] = [:]
        func record(_ id: ObjectID) throws -> Record? {
            if let known = read[id] { return known }
            let record = try context.record(with: id)
            read[id] = .some(record)
            return record
        }
        return { note in try self.describe(note, record: record) }
    }

    /// The `list` line of `note`, its folder and tags read with `record`.
    private func describe(_ note: Record, record: (ObjectID) throws -> Record?) throws -> String {
        let folder = try note.toOne["folder"].flatMap { try record($0) }
        var labels: [String] = []
        for tag in note.toMany["tags"] ?? [] {
            if let found = try record(tag) { labels.append(NotesModel.string(found["label"])) }
        }
        return NotesModel.describeNote(
            note,
            folderName: folder.map { NotesModel.string($0["name"]) },
            tagLabels: labels
        )
    }

    /// The folder named `name`.
    func folder(named name: String, in context: ObjectContext) throws -> Record? {
        try context.fetch(
            FetchRequest(entity: "Folder", predicate: Field("name") == .string(name), sortedBy: [.ascending("created")])
        ).first
    }

    /// The one note that `reference` names: an id prefix (as `list` prints it) or an exact title.
    func note(_ reference: String, in context: ObjectContext) throws -> Record {
        let notes = try context.fetch(FetchRequest(entity: "Note"))
        let lowered = reference.lowercased()
        var matches = notes.filter { $0.id.uuid.uuidString.lowercased().hasPrefix(lowered) && lowered.count >= 4 }
        if matches.isEmpty { matches = notes.filter { NotesModel.string($0["title"]) == reference } }
        guard let first = matches.first else {
            throw NotesError("no note has the id or title \(NotesModel.quoted(reference))")
        }
        guard matches.count == 1 else {
            let ids = matches.map { NotesModel.shortID($0.id) }.sorted().joined(separator: ", ")
            throw NotesError(
                "\(matches.count) notes match \(NotesModel.quoted(reference)) (\(ids)); name one by its id"
            )
        }
        return first
    }

    /// The tag labelled `label`, created if there is none.
    func tag(_ label: String, in context: ObjectContext) throws -> Record {
        if let tag = try context.fetch(FetchRequest(entity: "Tag", predicate: Field("label") == .string(label))).first {
            return tag
        }
        return try context.insert(entity: "Tag", values: ["label": .string(label)])
    }
}

/// Collects sync's events during one step of a command, as report lines.
final class EventLog: Sendable {
    private let collected = Locked<[SyncEvent]>([])
    private let conflicts = Locked<[CreationConflict]>([])
    private let observer: NSObjectProtocolBox
    private let conflictObserver: NSObjectProtocolBox

    init(_ sync: FolderSync) {
        let (collected, conflicts) = (self.collected, self.conflicts)
        observer = NSObjectProtocolBox(
            NotificationCenter.default.addObserver(forName: .concordSyncEvent, object: sync, queue: nil) { note in
                guard let event = note.userInfo?["event"] as? SyncEvent, EventLog.line(for: event) != nil else {
                    return
                }
                collected.withLock { $0.append(event) }
            }
        )
        // Two records created under one id on two devices: both kept, the later under a new id.
        conflictObserver = NSObjectProtocolBox(
            NotificationCenter.default.addObserver(forName: .concordSyncCreationConflict, object: sync, queue: nil) {
                note in
                guard let conflict = note.userInfo?["conflict"] as? CreationConflict else { return }
                conflicts.withLock { $0.append(conflict) }
            }
        )
    }

    func stop() {
        NotificationCenter.default.removeObserver(observer.value)
        NotificationCenter.default.removeObserver(conflictObserver.value)
    }

    /// The lines collected since the last call; consecutive exports are summed into one line.
    func lines() -> [String] {
        let events = collected.withLock { events in
            defer { events = [] }
            return events
        }
        var lines = conflicts.withLock { found in
            defer { found = [] }
            return found.map {
                "sync warning: two records were made as \(NotesModel.shortID($0.id)) on two devices; both kept, the later as \(NotesModel.shortID($0.movedTo))"
            }
        }
        var exported: (logs: Int, through: UInt64)?
        func flush() {
            if let (logs, through) = exported { lines.append("exported \(logs) log(s) through #\(through)") }
            exported = nil
        }
        for event in events {
            if case .exported(let logs, let through) = event {
                exported = ((exported?.logs ?? 0) + logs, max(exported?.through ?? 0, through))
                continue
            }
            flush()
            if let line = Self.line(for: event) { lines.append(line) }
        }
        flush()
        return lines
    }

    /// The line a command prints for `event`, or `nil` for the ones it does not report.
    static func line(for event: SyncEvent) -> String? {
        switch event {
        case .enabled(let join): return join.situation == .resuming ? "sync resumed" : "sync \(join)"
        case .imported(let logs, let changes): return "imported \(changes) change(s) from \(logs) log(s)"
        case .exported(let logs, let sequence): return "exported \(logs) log(s) through #\(sequence)"
        case .corruptLog, .corruptSentinel, .failed, .newerSchemaFound, .containerReset: return "sync warning: \(event)"
        default: return nil
        }
    }
}

/// A value shared between threads, guarded by a mutex; a class, so closures can share it.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<Result>(_ body: (inout sending Value) throws -> sending Result) rethrows -> sending Result {
        try mutex.withLock(body)
    }
}

/// An observer token, which Foundation does not mark `Sendable`; only added and removed.
struct NSObjectProtocolBox: @unchecked Sendable {
    let value: any NSObjectProtocol
    init(_ value: any NSObjectProtocol) { self.value = value }
}
