import Foundation
import Persistence

/// Whether a log's changes fit this device's schema.
extension SyncPayload {
    /// Why this payload cannot be applied under this device's schema, or `nil` when it can: a value
    /// of another type than its attribute's, a relationship pointing at another entity than its
    /// destination. Entities and properties this schema lacks are not a problem (they are
    /// ignored: an older schema had them).
    func malformation(in schema: Schema) -> String? {
        // The common case, a payload that fits, costs one pass; the first problem in a stable
        // order is looked for only when there is one.
        guard changes.contains(where: { malformation(of: $0, in: schema, sorted: false) != nil }) else {
            return nil
        }
        for change in changes {
            if let problem = malformation(of: change, in: schema, sorted: true) { return problem }
        }
        return nil
    }

    private func malformation(of change: SyncChange, in schema: Schema, sorted: Bool) -> String? {
        let stamps =
            [change.created, change.deleted].compactMap { $0 } + change.values.values.map(\.clock)
            + change.references.values.map(\.clock) + change.members.values.flatMap { $0.map(\.clock) }
        if let implausible = stamps.first(where: { !$0.isPlausible }) {
            return "\(change.id) carries the timestamp \(implausible), after the year 9999"
        }
        guard let entity = schema.entity(change.id.entity) else { return nil }
        func first<T>(in dictionary: [String: T], _ problem: (String, T) -> String?) -> String? {
            if sorted {
                for key in dictionary.keys.sorted() { if let found = problem(key, dictionary[key]!) { return found } }
            } else {
                for (key, value) in dictionary { if let found = problem(key, value) { return found } }
            }
            return nil
        }
        return first(in: change.values) { key, write in
            guard let attribute = entity.attribute(key), write.value != .null, write.value.type != attribute.type else {
                return nil
            }
            return "\(change.id).\(key) holds \(write.value), not \(attribute.type.rawValue)"
        }
            ?? first(in: change.references) { key, write in
                guard let relationship = entity.relationship(key), !relationship.isToMany, let target = write.target,
                    target.entity != relationship.destination
                else { return nil }
                return "\(change.id).\(key) points at \(target), not a \(relationship.destination)"
            }
            ?? first(in: change.members) { key, members in
                guard let relationship = entity.relationship(key), relationship.isToMany,
                    let wrong = members.first(where: { $0.target.entity != relationship.destination })
                else { return nil }
                return "\(change.id).\(key) holds \(wrong.target), not a \(relationship.destination)"
            }
    }
}
