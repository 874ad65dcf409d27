import Foundation

/// How a store written with an older schema version becomes a store of the current one: the
/// lightweight migration every plugin applies when it opens a store.
///
/// Allowed between versions: adding entities; adding attributes that are optional or have a
/// default (existing records get the default); adding relationships; removing attributes,
/// relationships and entities (their data is dropped). Anything else (a changed attribute
/// type, a new required attribute without a default, a relationship pointing elsewhere) is
/// ``PersistenceError/Code/incompatibleSchema``. A store from a newer version is
/// ``PersistenceError/Code/newerSchema``; a store of the same version must have the same
/// entities.
public struct SchemaMigration: Sendable, Hashable {
    /// The schema the store was written with.
    public var source: Schema
    /// The schema it is opened with.
    public var destination: Schema

    /// Entities new in the destination.
    public var addedEntities: [EntityDescription]
    /// Entities only the source has.
    public var removedEntities: [String]
    /// Per entity present in both, the attributes new in the destination.
    public var addedAttributes: [String: [AttributeDescription]]
    /// Per entity present in both, the attributes only the source has.
    public var removedAttributes: [String: [String]]
    /// Per entity present in both, the relationships new in the destination.
    public var addedRelationships: [String: [RelationshipDescription]]
    /// Per entity present in both, the relationships only the source has.
    public var removedRelationships: [String: [String]]

    /// Whether the two schemas are the same, so nothing needs doing.
    public var isIdentity: Bool { source.version == destination.version }

    /// Plans the migration of a store written with `source` to `destination`; throws naming
    /// `url` when it is not possible.
    public init(from source: Schema, to destination: Schema, url: URL?) throws(PersistenceError) {
        self.source = source
        self.destination = destination
        addedEntities = []
        removedEntities = []
        addedAttributes = [:]
        removedAttributes = [:]
        addedRelationships = [:]
        removedRelationships = [:]
        if source.version > destination.version {
            throw PersistenceError(
                .newerSchema,
                "the store was written with schema version \(source.version); this app has version \(destination.version): upgrade the app",
                url: url
            )
        }
        if source.version == destination.version {
            guard Self.sameEntities(source, destination) else {
                throw PersistenceError(
                    .incompatibleSchema,
                    "the store has schema version \(source.version) with other entities than this app's version \(destination.version)",
                    url: url
                )
            }
            return
        }
        for entity in destination.entities {
            guard let old = source.entity(entity.name) else {
                addedEntities.append(entity)
                continue
            }
            for attribute in entity.attributes {
                if let previous = old.attribute(attribute.name) {
                    guard previous.type == attribute.type else {
                        throw PersistenceError(
                            .incompatibleSchema,
                            "\(entity.name).\(attribute.name) changed type from \(previous.type.rawValue) to \(attribute.type.rawValue) between schema versions \(source.version) and \(destination.version)",
                            url: url
                        )
                    }
                } else {
                    guard attribute.isOptional || attribute.defaultValue != nil else {
                        throw PersistenceError(
                            .incompatibleSchema,
                            "\(entity.name).\(attribute.name) is new in schema version \(destination.version), required and has no default: existing records cannot get a value",
                            url: url
                        )
                    }
                    addedAttributes[entity.name, default: []].append(attribute)
                }
            }
            let removed = old.attributes.map(\.name).filter { entity.attribute($0) == nil }
            if !removed.isEmpty { removedAttributes[entity.name] = removed }
            for relationship in entity.relationships {
                if let previous = old.relationship(relationship.name) {
                    guard previous.destination == relationship.destination, previous.isToMany == relationship.isToMany
                    else {
                        throw PersistenceError(
                            .incompatibleSchema,
                            "\(entity.name).\(relationship.name) changed its destination or cardinality between schema versions \(source.version) and \(destination.version)",
                            url: url
                        )
                    }
                } else {
                    addedRelationships[entity.name, default: []].append(relationship)
                }
            }
            let gone = old.relationships.map(\.name).filter { entity.relationship($0) == nil }
            if !gone.isEmpty { removedRelationships[entity.name] = gone }
        }
        removedEntities = source.entities.map(\.name).filter { destination.entity($0) == nil }
    }

    /// `record`, written under the source schema, as the destination schema has it; `nil` when
    /// its entity was removed.
    public func migrate(_ record: Record) -> Record? {
        if isIdentity { return record }
        let entity = record.id.entity
        guard destination.entity(entity) != nil else { return nil }
        var record = record
        for attribute in addedAttributes[entity] ?? [] where record[attribute.name] == .null {
            if let value = attribute.defaultValue { record[attribute.name] = value }
        }
        for name in removedAttributes[entity] ?? [] { record.values[name] = nil }
        for name in removedRelationships[entity] ?? [] {
            record.toOne[name] = nil
            record.toMany[name] = nil
        }
        for key in Array(record.toOne.keys)
        where record.toOne[key].map({ destination.entity($0.entity) == nil }) ?? false {
            record.toOne[key] = nil
        }
        for key in Array(record.toMany.keys) {
            let kept = record.toMany[key]!.filter { destination.entity($0.entity) != nil }
            record.toMany[key] = kept.isEmpty ? nil : kept
        }
        return record
    }

    private static func sameEntities(_ a: Schema, _ b: Schema) -> Bool {
        a.entities.sorted { $0.name < $1.name } == b.entities.sorted { $0.name < $1.name }
    }
}
