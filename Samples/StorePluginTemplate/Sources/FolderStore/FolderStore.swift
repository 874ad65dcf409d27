// FolderStore: a Concord store plugin that keeps one file per record in a folder.
//
// This package is a template: it uses only the public API of Concord's `Persistence` and
// `FileCoordination` products, passes Concord's store-plugin contract (`StoreConformance`, in
// Tests/), and compiles unchanged outside Concord's repository. README.md walks through it.
//
// On disk, a store at `notes.folder` is two items (see `FolderLayout`):
//
//     notes.folder              the manifest: format marker, generation, metadata, schema (JSON)
//     notes.folder.d/
//       Item/<uuid>.json        one record each, `Record`'s Codable form
//       Owner/<uuid>.json
//       journal.json            only between a commit's first and last write (see below)
//
// The manifest is the store's main file: it is what the store presents, what every access
// coordinates on (the lock for the whole store), and what a commit replaces last. Every file is
// written durably through `FileCoordinator.replaceContentsOfItem(at:with:)` (a temporary file,
// `fsync`, `rename`, an `fsync` of the folder) and removed through `removeItem(at:)`.
//
// A commit touches several files, so it is made atomic by a redo journal: it first writes
// `journal.json` (the records to write, the ids to remove, the new manifest), then the record
// files, then the manifest, then removes the journal. A crash before the journal is in place
// leaves the old store; after it, the next access that finds the journal applies it again (it
// holds final states, so applying it twice is the same as once).
import FileCoordination
import Foundation
import Persistence
import Synchronization

/// A store that keeps each record in a file of its own, registered as `"folder"`.
///
/// It promises what ``PersistentStore`` promises: commits are atomic and durable (a redo
/// journal, and durable writes), two store objects on one store (in one process or several)
/// never lose each other's commits and see each other's on their next read, and files it cannot
/// read fail with a ``PersistenceError`` that names them. With ``StoreOptions/presentsFiles`` it
/// presents its manifest: other objects' commits are reported as
/// ``StoreEvent/Kind/changedExternally``, a deletion as ``StoreEvent/Kind/removed``, a move as
/// ``StoreEvent/Kind/moved(from:to:)``.
///
/// It suits stores of up to some thousands of records whose metadata is small: the store reads
/// every record file when it opens, and the metadata lives in the manifest, which each commit
/// rewrites.
public final class FolderStore: PersistentStore, FilePresenter {
    /// `"folder"`.
    public static var storeType: String { "folder" }

    /// The manifest at `url`, then the folder of records beside it.
    public static func files(at url: URL) -> [URL] {
        let layout = FolderLayout(url)
        return [layout.manifest, layout.folder]
    }

    /// The schema its records follow.
    public let schema: Schema
    /// How it was opened.
    public let options: StoreOptions
    /// Where it reports events.
    public let events = StoreEventChannel()

    private enum Phase { case open, closed, removed }

    private struct State {
        var layout: FolderLayout
        var contents: FolderContents
        /// The generation last reported (or committed by this object): a change to another one
        /// is reported once as `changedExternally`.
        var announced: UUID
        var phase: Phase = .open
    }

    private let state: Mutex<State>
    /// Where presenter callbacks reload, one at a time and in order.
    private let reloads = DispatchQueue(label: "folderstore.reload")

    /// Opens the store at `url`, creating it if there is no manifest there (unless read-only).
    ///
    /// - Throws: ``PersistenceError`` naming the file: ``PersistenceError/Code/corruptStore`` or
    ///   ``PersistenceError/Code/notAStore`` for a manifest or record it cannot read,
    ///   ``PersistenceError/Code/newerSchema`` or ``PersistenceError/Code/incompatibleSchema``
    ///   for a schema it cannot migrate from. A store that fails to open is never written.
    public init(url: URL, schema: Schema, options: StoreOptions) throws {
        self.schema = schema
        self.options = options
        let layout = FolderLayout(url.standardizedFileURL)
        let coordinator = FileCoordinator()
        var contents: FolderContents
        if FileManager.default.fileExists(atPath: layout.manifest.path) {
            contents = try coordinator.coordinate(readingItemAt: layout.manifest, options: []) { _ in try layout.load()
            }
            let migration = try SchemaMigration(from: contents.schema, to: schema, url: layout.manifest)
            // A journal left by a crash, or an older schema: written now (a read-only store
            // serves both from memory).
            if !options.isReadOnly && (contents.hasJournal || !migration.isIdentity) {
                contents = try layout.write(schema: schema, coordinator: coordinator) { _ in }
            } else {
                contents.migrate(migration)
            }
        } else {
            guard !options.isReadOnly else {
                throw PersistenceError(.ioFailed, "there is no store to open read-only", url: layout.manifest)
            }
            contents = try layout.create(schema: schema, coordinator: coordinator)
        }
        state = Mutex(State(layout: layout, contents: contents, announced: contents.generation))
        if options.presentsFiles { FileCoordinator.addFilePresenter(self) }
    }

    deinit {
        if options.presentsFiles { FileCoordinator.removeFilePresenter(self) }
    }

    /// Where the store is now (its manifest; it follows moves).
    public var url: URL { state.withLock { $0.layout.manifest } }

    /// The metadata as last committed (by any writer).
    public func metadata() throws -> StoreMetadata {
        try current().metadata
    }

    /// The records `request` selects, in its order, as last committed (by any writer).
    public func fetch(_ request: FetchRequest) throws -> [Record] {
        try request.validate(in: schema)
        return request.evaluate(over: try current().records.values.filter { $0.id.entity == request.entity })
    }

    /// How many records `request` selects, ignoring its limit and offset.
    public func count(for request: FetchRequest) throws -> Int {
        try request.validate(in: schema)
        return try current().records.values.count(where: request.matches)
    }

    /// The records with these ids that the store holds.
    public func records(with ids: [ObjectID]) throws -> [Record] {
        let records = try current().records
        return ids.compactMap { records[$0] }
    }

    /// Applies `changes` atomically and durably, on top of what any other writer committed.
    public func commit(_ changes: StoreChanges) throws {
        try changes.validate(in: schema)
        let layout = try withOpenState { $0.layout }
        guard !options.isReadOnly else {
            throw PersistenceError(.readOnly, "the store was opened read-only", url: layout.manifest)
        }
        if changes.isEmpty { return }
        let cached = try withOpenState { $0.contents }
        let written = try layout.write(
            schema: schema,
            coordinator: FileCoordinator(filePresenter: self),
            cached: cached
        ) { next in
            next.apply(changes)
        }
        state.withLock { state in
            guard state.phase == .open else { return }
            state.contents = written
            state.announced = written.generation
        }
    }

    /// Re-reads the store if another writer committed since it was read.
    public func refresh() throws {
        _ = try current()
    }

    /// Stops presenting the manifest; every later call throws ``PersistenceError/Code/storeClosed``.
    public func close() {
        let wasOpen = state.withLock { state in
            defer { if state.phase == .open { state.phase = .closed } }
            return state.phase == .open
        }
        if wasOpen, options.presentsFiles { FileCoordinator.removeFilePresenter(self) }
    }

    // MARK: FilePresenter

    /// The manifest, while the store is open.
    public var presentedItemURL: URL? { state.withLock { $0.phase == .open ? $0.layout.manifest : nil } }

    /// Another writer replaced the manifest: reload on the store's own queue (reading under
    /// coordination inside this callback could wait for the presenter queue it runs on).
    public func presentedItemDidChange() {
        reloads.async { [weak self] in self?.reloadAndAnnounce() }
    }

    /// The manifest (and, before it, the folder of records) moved: the store follows, and
    /// reports ``StoreEvent/Kind/moved(from:to:)``.
    public func presentedItemDidMove(to newURL: URL) {
        let moved = state.withLock { state -> (URL, URL)? in
            guard state.phase == .open else { return nil }
            let old = state.layout.manifest
            state.layout = FolderLayout(newURL.standardizedFileURL)
            return old == state.layout.manifest ? nil : (old, state.layout.manifest)
        }
        guard let (old, new) = moved else { return }
        events.send(
            StoreEvent(
                storeType: Self.storeType,
                storeIdentifier: identifier,
                url: new,
                kind: .moved(from: old, to: new)
            )
        )
    }

    /// The store's files are being deleted: the store tears down, reports
    /// ``StoreEvent/Kind/removed``, and every later call throws ``PersistenceError/Code/storeRemoved``.
    public func accommodatePresentedItemDeletion() throws {
        let url = state.withLock { state -> URL? in
            guard state.phase == .open else { return nil }
            state.phase = .removed
            return state.layout.manifest
        }
        guard let url else { return }
        if options.presentsFiles { FileCoordinator.removeFilePresenter(self) }
        events.send(StoreEvent(storeType: Self.storeType, storeIdentifier: identifier, url: url, kind: .removed))
    }

    // MARK: Reading

    private var identifier: UUID { state.withLock { $0.contents.metadata.storeIdentifier } }

    private func withOpenState<T>(_ body: (inout State) throws -> T) throws -> T {
        try state.withLock { state in
            switch state.phase {
            case .open: return try body(&state)
            case .closed: throw PersistenceError(.storeClosed, "the store was closed", url: state.layout.manifest)
            case .removed:
                throw PersistenceError(.storeRemoved, "the store's files were deleted", url: state.layout.manifest)
            }
        }
    }

    /// What the store holds now: the cached contents, unless the manifest's generation (one
    /// small read) says another writer committed since, or a journal appeared; then everything
    /// is read again under a coordinated read.
    private func current() throws -> FolderContents {
        let (layout, cached) = try withOpenState { ($0.layout, $0.contents) }
        if layout.isCurrent(cached) { return cached }
        let loaded = try reload(layout)
        return try withOpenState { state in
            state.contents = loaded
            return loaded
        }
    }

    private func reload(_ layout: FolderLayout) throws -> FolderContents {
        var loaded = try FileCoordinator(filePresenter: self).coordinate(readingItemAt: layout.manifest, options: []) {
            _ in
            try layout.load()
        }
        loaded.migrate(try SchemaMigration(from: loaded.schema, to: schema, url: layout.manifest))
        return loaded
    }

    /// Reloads after another writer's commit, and reports it once.
    private func reloadAndAnnounce() {
        guard let layout = state.withLock({ $0.phase == .open ? $0.layout : nil }) else { return }
        // A missing manifest is a move in progress or a deletion: their own callbacks follow.
        guard FileManager.default.fileExists(atPath: layout.manifest.path) else { return }
        do {
            let loaded = try reload(layout)
            let changed = state.withLock { state -> Bool in
                guard state.phase == .open else { return false }
                state.contents = loaded
                defer { state.announced = loaded.generation }
                return state.announced != loaded.generation
            }
            if changed {
                events.send(
                    StoreEvent(
                        storeType: Self.storeType,
                        storeIdentifier: loaded.metadata.storeIdentifier,
                        url: layout.manifest,
                        kind: .changedExternally
                    )
                )
            }
        } catch {
            events.send(
                StoreEvent(
                    storeType: Self.storeType,
                    storeIdentifier: identifier,
                    url: layout.manifest,
                    kind: .reloadFailed("\(error)")
                )
            )
        }
    }
}
