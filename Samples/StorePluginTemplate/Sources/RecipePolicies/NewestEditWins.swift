import Foundation
import Persistence

/// A merge policy for recipes: when this context and another writer (another context, another
/// process) both changed a property of one recipe since this context read it, the version
/// edited last wins for those properties, the stored one on a tie; a recipe the other writer
/// deleted stays deleted. Properties only one side changed keep that side's value, as with
/// every merge policy.
///
/// `.mineWins` (the default) and `.storeWins` cover most apps; a resolver is for rules that
/// depend on the data, like this one. It must not depend on which process saves first if two
/// devices could decide the same conflict: here, `edited` is part of the data both see.
public struct NewestEditWins: MergeConflictResolver {
    /// A resolver.
    public init() {}

    /// The record to store for `conflict`.
    public func resolve(_ conflict: MergeConflict) throws -> Record? {
        guard let stored = conflict.stored else { return nil }
        let mineIsNewer = Self.edited(conflict.mine) > Self.edited(stored)
        var result = stored
        // Start from the store's record, then take every property this context changed, and
        // the conflicting ones only if this context's edit is newer.
        for (key, value) in conflict.mine.values where value != conflict.base.values[key] {
            if !conflict.conflictingKeys.contains(key) || mineIsNewer { result.values[key] = value }
        }
        for key in Set(conflict.mine.toOne.keys).union(conflict.base.toOne.keys)
        where conflict.mine.toOne[key] != conflict.base.toOne[key] {
            if !conflict.conflictingKeys.contains(key) || mineIsNewer { result.toOne[key] = conflict.mine.toOne[key] }
        }
        return result
    }

    private static func edited(_ record: Record) -> Date {
        if case .date(let date) = record["edited"] { return date }
        return .distantPast
    }
}
