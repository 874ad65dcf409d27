import Foundation
import Persistence

/// A whole-file store in a few lines: the snapshot as JSON through its Codable conformance.
/// The object-context tests run on it so they need no plugin.
typealias SnapshotStore = WholeFileStore<SnapshotFormat>

/// The snapshot's Codable form as JSON.
enum SnapshotFormat: StoreFileFormat {
    static var storeType: String { "snapshot" }

    static func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data {
        try JSONEncoder().encode(snapshot)
    }

    static func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot {
        do {
            return try JSONDecoder().decode(StoreSnapshot.self, from: data)
        } catch {
            throw PersistenceError(.corruptStore, "not a readable snapshot: \(error)", url: url)
        }
    }
}
