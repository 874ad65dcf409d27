import FolderSync
import Foundation
import Persistence

/// A save participant that, once, runs an import just before a save's commit phase: another
/// process's import landing between a save's validation and its commit.
package final class ImportBeforeCommit: SaveParticipant, @unchecked Sendable {
    private let importer: () throws -> Int
    /// How many logs the import applied.
    package private(set) var imported = 0
    private var done = false

    /// An import by `importer` (returning the number of logs it applied).
    package init(importer: @escaping () throws -> Int) { self.importer = importer }

    /// Runs `save` with `racer` importing before the commit of `coordinator`'s next save, whose
    /// sync participant is `sync` (the import runs before it takes the sync lock).
    package static func during<T>(
        saveOf coordinator: StoreCoordinator,
        sync: FolderSync,
        racer: ImportBeforeCommit,
        _ save: () throws -> T
    ) rethrows -> T {
        coordinator.removeSaveParticipant(sync)
        coordinator.addSaveParticipant(racer)
        coordinator.addSaveParticipant(sync)
        defer { coordinator.removeSaveParticipant(racer) }
        return try save()
    }

    package func willCommit(
        _ changes: inout StoreChanges,
        to store: any PersistentStore,
        origin: ChangeOrigin,
        context: ObjectContext
    ) throws {}

    package func performCommits<T>(_ body: () throws -> T) throws -> T {
        if !done {
            done = true
            imported = try importer()
        }
        return try body()
    }
}
