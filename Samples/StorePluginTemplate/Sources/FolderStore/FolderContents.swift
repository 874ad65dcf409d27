import Foundation
import Persistence

/// The manifest: what makes a file a folder store's main file.
struct Manifest: Codable, Sendable, Equatable {
    /// Always ``Manifest/marker``: a JSON file without it is some other file.
    var format = Manifest.marker
    /// The layout's version.
    var formatVersion = 1
    /// Changes with every commit: how a reader tells that another writer committed.
    var generation: UUID
    var metadata: StoreMetadata
    var schema: Schema

    static let marker = "concord.folder-store"

    /// The manifest in `data`; throws ``PersistenceError`` naming `url`:
    /// ``PersistenceError/Code/notAStore`` for JSON that is not a manifest, ``PersistenceError/Code/corruptStore``
    /// for anything else.
    static func decode(_ data: Data, url: URL) throws -> Manifest {
        struct Marker: Decodable {
            var format: String?
            var formatVersion: Int?
        }
        let marker: Marker
        do {
            marker = try JSONDecoder().decode(Marker.self, from: data)
        } catch {
            throw PersistenceError(
                .corruptStore,
                "the file is not a folder store's manifest (damaged, truncated, empty, or not JSON)",
                url: url,
                underlying: error
            )
        }
        guard marker.format == Self.marker else {
            throw PersistenceError(
                .notAStore,
                "the file is JSON without the \"format\": \"\(Self.marker)\" marker, so not a folder store",
                url: url
            )
        }
        guard marker.formatVersion == 1 else {
            throw PersistenceError(
                .corruptStore,
                "the manifest has format version \(marker.formatVersion.map(String.init) ?? "none"); this plugin reads version 1",
                url: url
            )
        }
        return try FolderLayout.decode(Manifest.self, from: data, url: url, what: "a manifest")
    }
}

/// A commit's redo journal: final states only, so applying it twice is applying it once.
struct Journal: Codable, Sendable {
    /// The manifest after the commit.
    var manifest: Manifest
    /// The records the commit inserted or changed, whole.
    var writes: [Record]
    /// The records the commit removed.
    var removals: [ObjectID]
}

/// What a folder store holds, in memory.
struct FolderContents: Sendable {
    var manifest: Manifest
    var records: [ObjectID: Record] = [:]
    /// The bytes of the manifest file these contents were read from or written with (with a
    /// journal applied on top, ``manifest`` is the journal's): what tells whether they are
    /// still current.
    var manifestBytes: Data
    /// Whether a journal was found (and applied in memory) when these contents were read.
    var hasJournal = false

    init(_ manifest: Manifest, bytes: Data) {
        self.manifest = manifest
        manifestBytes = bytes
    }

    var metadata: StoreMetadata { manifest.metadata }
    var schema: Schema { manifest.schema }
    var generation: UUID { manifest.generation }

    /// Applies an interrupted commit's journal (in memory).
    mutating func replay(_ journal: Journal) {
        for record in journal.writes { records[record.id] = record }
        for id in journal.removals { records[id] = nil }
        manifest = journal.manifest
        hasJournal = true
    }

    /// Inserts, then updates, then deletes, then metadata entries, as ``PersistentStore/commit(_:)`` says.
    mutating func apply(_ changes: StoreChanges) {
        for record in changes.inserts { records[record.id] = record }
        for update in changes.updates {
            if let record = records[update.id] { records[update.id] = update.applied(to: record) }
        }
        for id in changes.deletes { records[id] = nil }
        for (key, value) in changes.metadataEntries { manifest.metadata.entries[key] = value }
    }

    /// Brings the records and the schema to the migration's destination (nothing for an identity).
    mutating func migrate(_ migration: SchemaMigration) {
        guard !migration.isIdentity else { return }
        records = records.compactMapValues(migration.migrate)
        manifest.schema = migration.destination
        manifest.metadata.schemaVersion = migration.destination.version
    }
}
