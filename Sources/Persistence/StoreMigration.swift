import FileCoordination
import Foundation

/// How far a store migration has come.
public struct StoreMigrationProgress: Sendable, Hashable {
    /// The entity being copied.
    public var entity: String
    /// Records copied so far, all entities together.
    public var completedRecords: Int
    /// Records to copy, all entities together.
    public var totalRecords: Int

    /// The fraction done, from 0 to 1.
    public var fractionCompleted: Double {
        totalRecords == 0 ? 1 : Double(completedRecords) / Double(totalRecords)
    }
}

/// Copies a store to another type and/or place: JSON to SQLite, say, or an SQLite store to a
/// new folder.
///
/// The source is opened read-only, without presenting its files, and held under a coordinated
/// read for the whole copy, so coordinated writers in any process wait until it is done. Records
/// are copied entity by entity in id order, `batchSize` at a time: memory stays proportional to
/// the batch for a destination that writes in batches (SQLite), however large the store. A
/// whole-file destination (JSON, plist) holds its records in memory anyway and is written once,
/// at the end. The destination gets the source's metadata entries and a new store identifier.
/// If anything fails, the destination's files are removed and the source is untouched.
public struct StoreMigrator: Sendable {
    /// The registry that names the store types.
    public var registry: StoreRegistry
    /// Records per batch.
    public var batchSize: Int

    /// A migrator.
    public init(registry: StoreRegistry = .shared, batchSize: Int = 1000) {
        self.registry = registry
        self.batchSize = max(batchSize, 1)
    }

    /// Copies the store of `sourceType` at `source` to a new store of `destinationType` at
    /// `destination`, calling `progress` after each batch (on the calling thread).
    ///
    /// - Throws: ``PersistenceError`` naming the file: the destination exists already
    ///   (``PersistenceError/Code/invalidRequest``), the source cannot be opened, a write fails.
    /// - Returns: the destination's metadata.
    @discardableResult
    public func migrateStore(
        ofType sourceType: String,
        at source: URL,
        toType destinationType: String,
        at destination: URL,
        schema: Schema,
        progress: ((StoreMigrationProgress) -> Void)? = nil
    ) throws -> StoreMetadata {
        let destinationClass = try registry.storeType(named: destinationType)
        let sourceClass = try registry.storeType(named: sourceType)
        if let existing = destinationClass.files(at: destination).first(where: {
            FileManager.default.fileExists(atPath: $0.path)
        }) {
            throw PersistenceError(
                .invalidRequest,
                "the migration's destination exists already; move or remove it first",
                url: existing
            )
        }
        let readOnly = StoreOptions(isReadOnly: true, presentsFiles: false)
        do {
            return try FileCoordinator().coordinate(readingItemAt: source, options: []) { source in
                let input = try sourceClass.init(url: source, schema: schema, options: readOnly)
                defer { input.close() }
                let output = try destinationClass.init(
                    url: destination,
                    schema: schema,
                    options: StoreOptions(presentsFiles: false)
                )
                defer { output.close() }
                do {
                    return try copy(from: input, to: output, schema: schema, progress: progress)
                } catch {
                    output.close()
                    try? StoreCoordinator.destroyStore(ofType: destinationType, at: destination, registry: registry)
                    throw error
                }
            }
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.ioFailed, "the migration failed", url: source, underlying: error)
        }
    }

    private func copy(
        from input: any PersistentStore,
        to output: any PersistentStore,
        schema: Schema,
        progress: ((StoreMigrationProgress) -> Void)?
    ) throws -> StoreMetadata {
        let entities = schema.entities.map(\.name)
        var total = 0
        for entity in entities { total += try input.count(for: FetchRequest(entity: entity)) }
        var done = 0
        let wholeFile = output is any WholeFileCommitting
        var pending = StoreChanges()
        for entity in entities {
            try input.enumerateRecords(of: entity, batchSize: batchSize) { batch in
                pending.inserts.append(contentsOf: batch)
                if !wholeFile {
                    try output.commit(pending)
                    pending = StoreChanges()
                }
                done += batch.count
                progress?(StoreMigrationProgress(entity: entity, completedRecords: done, totalRecords: total))
            }
        }
        for (key, value) in try input.metadata().entries { pending.metadataEntries[key] = .some(value) }
        try output.commit(pending)
        return try output.metadata()
    }
}
