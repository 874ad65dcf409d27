import FileCoordination
import Foundation
import Persistence

/// Where a folder store's files are, and how they are read and written. Every method that
/// reads or writes expects to run inside a coordination of ``manifest`` (the store's lock).
struct FolderLayout: Sendable, Equatable {
    /// The store's main file: format, generation, metadata and schema.
    let manifest: URL
    /// The records, one file each: `<Entity>.<uuid>.json`.
    let folder: URL
    /// A commit's redo journal, there only while a commit is being applied.
    var journal: URL { folder.appendingPathComponent("journal.json", isDirectory: false) }

    init(_ manifest: URL) {
        self.manifest = manifest
        folder = URL(fileURLWithPath: manifest.path + ".d", isDirectory: true)
    }

    /// The file of the record `id`.
    func file(of id: ObjectID) -> URL {
        folder.appendingPathComponent("\(id.entity).\(id.uuid.uuidString.lowercased()).json", isDirectory: false)
    }

    // MARK: Reading

    /// Whether `cached` is what is on disk: the manifest has the same bytes (its generation
    /// changes with every commit) and a journal is there exactly when it was. One small read,
    /// not coordinated (the manifest is only ever replaced whole). A missing manifest counts as
    /// current (a move or a deletion is under way, and the presenter hears of it).
    func isCurrent(_ cached: FolderContents) -> Bool {
        guard let data = try? Data(contentsOf: manifest) else {
            return !FileManager.default.fileExists(atPath: manifest.path)
        }
        return data == cached.manifestBytes && FileManager.default.fileExists(atPath: journal.path) == cached.hasJournal
    }

    /// Everything the store holds: the manifest, every record file, and a journal left by an
    /// interrupted commit applied on top (in memory).
    func load() throws -> FolderContents {
        let bytes = try read(self.manifest)
        let manifest = try Manifest.decode(bytes, url: self.manifest)
        var contents = FolderContents(manifest, bytes: bytes)
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        } catch {
            throw PersistenceError(
                .corruptStore,
                "the store's folder of records is missing or unreadable",
                url: folder,
                underlying: error
            )
        }
        for name in names.sorted() where name.hasSuffix(".json") && !name.hasPrefix(".") && name != "journal.json" {
            let url = folder.appendingPathComponent(name, isDirectory: false)
            let record = try Self.decode(Record.self, from: try read(url), url: url, what: "a record")
            guard file(of: record.id).lastPathComponent == name else {
                throw PersistenceError(
                    .corruptStore,
                    "the file holds record \(record.id), whose file has another name",
                    url: url
                )
            }
            try Self.check(record, in: manifest.schema, url: url)
            contents.records[record.id] = record
        }
        if FileManager.default.fileExists(atPath: journal.path) {
            let journal = try Self.decode(
                Journal.self,
                from: try read(self.journal),
                url: self.journal,
                what: "a commit journal"
            )
            contents.replay(journal)
        }
        return contents
    }

    private func read(_ url: URL) throws -> Data {
        do {
            return try Data(contentsOf: url)
        } catch {
            throw PersistenceError(.ioFailed, "cannot read the file", url: url, underlying: error)
        }
    }

    /// A record whose entity or properties the store's schema lacks is damage, not data.
    private static func check(_ record: Record, in schema: Schema, url: URL) throws {
        guard let entity = schema.entity(record.id.entity) else {
            throw PersistenceError(
                .corruptStore,
                "the record's entity \(record.id.entity) is not in the store's schema",
                url: url
            )
        }
        let attributes = Set(entity.attributes.map(\.name))
        let relationships = Set(entity.relationships.map(\.name))
        let unknown = Set(record.values.keys).subtracting(attributes)
            .union(Set(record.toOne.keys).union(record.toMany.keys).subtracting(relationships))
        if let name = unknown.sorted().first {
            throw PersistenceError(
                .corruptStore,
                "record \(record.id) has a property \(name) that \(entity.name) lacks",
                url: url
            )
        }
    }

    // MARK: Writing

    /// Creates the store (the folder, then the manifest: the manifest is what makes it a
    /// store), unless another process created it meanwhile; returns what it holds.
    func create(schema: Schema, coordinator: FileCoordinator) throws -> FolderContents {
        try Self.writing(manifest) {
            try coordinator.coordinate(writingItemAt: manifest, options: []) { _ in
                if FileManager.default.fileExists(atPath: manifest.path) { return try load() }
                let manifest = Manifest(
                    generation: UUID(),
                    metadata: StoreMetadata(schemaVersion: schema.version),
                    schema: schema
                )
                let bytes = try Self.encode(manifest)
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                // The folder's entry is in the manifest's directory, which this write synchronizes.
                try coordinator.replaceContentsOfItem(at: self.manifest, with: bytes)
                return FolderContents(manifest, bytes: bytes)
            }
        }
    }

    /// One commit, in an exclusive coordination of the manifest: reads what is on disk (unless
    /// `cached` still is), finishes an interrupted commit, migrates to `schema`, lets `change`
    /// edit the contents, and writes the difference through the journal.
    ///
    /// - Returns: what the store holds after the commit.
    func write(
        schema: Schema,
        coordinator: FileCoordinator,
        cached: FolderContents? = nil,
        _ change: (inout FolderContents) throws -> Void
    ) throws -> FolderContents {
        try Self.writing(manifest) {
            try coordinator.coordinate(writingItemAt: manifest, options: []) { _ in
                guard FileManager.default.fileExists(atPath: manifest.path) else {
                    throw PersistenceError(.storeRemoved, "the store's manifest was deleted", url: manifest)
                }
                let current = if let cached, isCurrent(cached) { cached } else { try load() }
                if current.hasJournal {
                    // The interrupted commit's journal: apply it to the files before anything else.
                    try apply(
                        try Self.decode(Journal.self, from: try read(journal), url: journal, what: "a commit journal"),
                        coordinator: coordinator
                    )
                }
                var next = current
                next.migrate(try SchemaMigration(from: current.schema, to: schema, url: manifest))
                try change(&next)
                next.manifest.generation = UUID()
                let journal = Journal(
                    manifest: next.manifest,
                    writes: next.records.values.filter { current.records[$0.id] != $0 }.sorted { $0.id < $1.id },
                    removals: current.records.keys.filter { next.records[$0] == nil }.sorted()
                )
                // The commit point: once the journal is in place, the commit happens, now or at
                // the next access after a crash.
                try coordinator.replaceContentsOfItem(at: self.journal, with: try Self.encode(journal))
                next.manifestBytes = try apply(journal, coordinator: coordinator)
                next.hasJournal = false
                return next
            }
        }
    }

    /// Writes a journal's records, removes its removals, replaces the manifest, and removes the
    /// journal: each step durable, and the whole safe to repeat. Returns the manifest's bytes.
    @discardableResult
    private func apply(_ journal: Journal, coordinator: FileCoordinator) throws -> Data {
        for record in journal.writes {
            try coordinator.replaceContentsOfItem(at: file(of: record.id), with: try Self.encode(record))
        }
        for id in journal.removals {
            try coordinator.removeItem(at: file(of: id))
        }
        let bytes = try Self.encode(journal.manifest)
        try coordinator.replaceContentsOfItem(at: manifest, with: bytes)
        try coordinator.removeItem(at: self.journal)
        return bytes
    }

    // MARK: Encoding

    /// Runs `body`; any error that is not a ``PersistenceError`` becomes one naming `url`.
    private static func writing<T>(_ url: URL, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.ioFailed, "cannot write the store", url: url, underlying: error)
        }
    }

    /// JSON with sorted keys; doubles JSON cannot hold (NaN, ±∞) as strings.
    static func encode(_ value: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "Infinity",
            negativeInfinity: "-Infinity",
            nan: "NaN"
        )
        return try encoder.encode(value)
    }

    /// Decodes `type` from `data`, or throws ``PersistenceError/Code/corruptStore`` naming `url`.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data, url: URL, what: String) throws -> T {
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(
            positiveInfinity: "Infinity",
            negativeInfinity: "-Infinity",
            nan: "NaN"
        )
        do {
            return try decoder.decode(type, from: data)
        } catch {
            throw PersistenceError(
                .corruptStore,
                "the file is not \(what) of a folder store (damaged, truncated or empty)",
                url: url,
                underlying: error
            )
        }
    }
}
