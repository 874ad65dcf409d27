import Foundation

// Which entities an import's save resolves duplicates of. Resolving reads every record of the
// entity, so an import does it only where duplicates can have appeared since the last
// resolution: the entities it changes itself, and those a local save changed since (a local
// save marks them in their store, in its own commit). A store whose records of an entity were
// found free of duplicates under the current policy says so with an entry; every other case
// (no entry, or one made under another policy or schema) resolves.

extension ObjectContext {
    /// The metadata key of the entry saying that the store's records of `entity` were free of
    /// duplicates at the last resolution, and that no local save changed them since.
    static func duplicateFreeKey(_ entity: String) -> String { "concord.unique." + entity }

    /// What that entry holds: the policy (its type, uniqueness and stamp attribute) and the
    /// schema version it was found under. Another policy or schema resolves again.
    func duplicateFreeStamp(_ policy: any UniquenessPolicy) -> Data {
        let kind: String
        switch policy.uniqueness {
        case .singleton: kind = "singleton"
        case .key(let attributes): kind = "key:" + attributes.joined(separator: ",")
        case .custom: kind = "custom"
        }
        let type = String(reflecting: Swift.type(of: policy))
        return Data("\(schema.version)|\(type)|\(kind)|\(policy.creationStampAttribute ?? "")".utf8)
    }

    /// The entities with a uniqueness policy among whose records this context may make a
    /// duplicate or change a winner: it inserts one, or updates what the policy reads (the key's
    /// attributes and the creation stamp; anything, for a custom uniqueness). An update of other
    /// properties (a folder's set of notes, when a note is filed into it) leaves them be.
    func changedUniqueEntities() -> Set<String> {
        let policies = coordinator.policies
        let unique = Set(policies.uniqueEntities)
        guard !unique.isEmpty else { return [] }
        var found = Set<String>()
        for id in inserted.keys where unique.contains(id.entity) { found.insert(id.entity) }
        for (id, pair) in updated where unique.contains(id.entity) && !found.contains(id.entity) {
            guard let policy = policies.uniquenessPolicy(for: id.entity) else { continue }
            var read = policy.creationStampAttribute.map { [$0] } ?? []
            switch policy.uniqueness {
            case .singleton: break
            case .key(let attributes): read += attributes
            case .custom:
                found.insert(id.entity)
                continue
            }
            if read.contains(where: { pair.base[$0] != pair.current[$0] }) { found.insert(id.entity) }
        }
        return found
    }

    /// An import's resolution: the entities it changes, and those its stores do not say are
    /// free of duplicates; then the entities the resolution itself changed (a policy's merge, a
    /// relinked reference), until none is left. Each entity resolved is marked free of
    /// duplicates in this save's commit.
    func resolveDuplicatesForImport() throws {
        let policies = coordinator.policies
        var pending = changedUniqueEntities()
        // The entries of the other entities, one read per store.
        var asked: [ObjectIdentifier: (store: any PersistentStore, entities: [String])] = [:]
        for entity in policies.uniqueEntities where !pending.contains(entity) {
            let store = try coordinator.store(forEntity: entity)
            asked[ObjectIdentifier(store), default: (store, [])].entities.append(entity)
        }
        for (store, entities) in asked.values {
            let entries = try store.metadataEntries(forKeys: entities.map(Self.duplicateFreeKey))
            for entity in entities {
                guard let policy = policies.uniquenessPolicy(for: entity) else { continue }
                if entries[Self.duplicateFreeKey(entity)] != duplicateFreeStamp(policy) { pending.insert(entity) }
            }
        }
        var resolved = Set<String>()
        while !pending.isEmpty {
            try resolveDuplicates(of: pending.sorted())
            resolved.formUnion(pending)
            pending = changedUniqueEntities().subtracting(resolved)
        }
        for entity in resolved.sorted() {
            guard let policy = policies.uniquenessPolicy(for: entity) else { continue }
            setMetadata(
                duplicateFreeStamp(policy),
                forKey: Self.duplicateFreeKey(entity),
                in: try coordinator.store(forEntity: entity)
            )
        }
    }

    /// A local save's part: the entities with a uniqueness policy it inserts or updates records
    /// of are no longer known to be free of duplicates (the entries go in the same commit).
    func unmarkDuplicateFree() throws -> [(store: any PersistentStore, key: String)] {
        try changedUniqueEntities().sorted().map { entity in
            (try coordinator.store(forEntity: entity), Self.duplicateFreeKey(entity))
        }
    }
}
