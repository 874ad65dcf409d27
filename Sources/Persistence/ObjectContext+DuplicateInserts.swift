import Foundation

// A local insert never replaces a record silently: an id already held is an error, at the
// insert and again at the save (another context or process may have saved one meanwhile).
extension ObjectContext {
    /// Throws when a store holds a record under the id of one this local save inserts, unless
    /// this context read that record before (it deleted it, and inserts it anew on purpose).
    /// Runs under every save participant's lock, right before the commit.
    func checkInsertsAreNew() throws {
        let unseen = inserted.keys.filter { snapshots[$0] == nil }
        for (entity, ids) in Dictionary(grouping: unseen, by: \.entity) {
            let store = try coordinator.store(forEntity: entity)
            let held = try store.records(with: ids).map(\.id)
            if !held.isEmpty { throw duplicateInsert(held.sorted(), store: store.url) }
        }
    }

    /// The error for local inserts of `ids`, which the store at `url` already holds.
    func duplicateInsert(_ ids: [ObjectID], store url: URL?) -> PersistenceError {
        let named = ids.prefix(3).map(\.description).joined(separator: ", ") + (ids.count > 3 ? ", ..." : "")
        return PersistenceError(
            .invalidRequest,
            "cannot insert \(named): the store already holds a record with \(ids.count == 1 ? "this id" : "these ids") "
                + "(an insert never replaces a record: update it, or delete it first); nothing was saved",
            url: url,
            reason: .duplicateID
        )
    }
}
