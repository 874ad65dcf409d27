import Foundation

/// What happens to related records when a record is deleted.
public enum DeleteRule: String, Sendable, Hashable, Codable {
    /// The related records stay; their reference to the deleted record is cleared.
    case nullify
    /// The related records are deleted too.
    case cascade
    /// The deletion fails while related records exist.
    case deny
}

/// One attribute of an entity.
public struct AttributeDescription: Sendable, Hashable, Codable {
    /// The attribute's name, unique among the entity's properties.
    public var name: String
    /// The type of its values.
    public var type: AttributeType
    /// Whether a record may leave it `null`.
    public var isOptional: Bool
    /// The value a new record gets when none is given.
    public var defaultValue: Value?
    /// Whether stores that can index (SQLite) keep an index on it, so fetches that compare it
    /// or sort by it do not read every record.
    public var isIndexed: Bool

    /// An attribute; required unless `isOptional`.
    public init(
        _ name: String,
        _ type: AttributeType,
        isOptional: Bool = false,
        defaultValue: Value? = nil,
        isIndexed: Bool = false
    ) {
        self.name = name
        self.type = type
        self.isOptional = isOptional
        self.defaultValue = defaultValue
        self.isIndexed = isIndexed
    }

    private enum CodingKeys: String, CodingKey { case name, type, isOptional, defaultValue, isIndexed }

    /// Decodes an attribute; `isIndexed` may be absent (false).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        type = try container.decode(AttributeType.self, forKey: .type)
        isOptional = try container.decodeIfPresent(Bool.self, forKey: .isOptional) ?? false
        defaultValue = try container.decodeIfPresent(Value.self, forKey: .defaultValue)
        isIndexed = try container.decodeIfPresent(Bool.self, forKey: .isIndexed) ?? false
    }
}

/// One relationship of an entity.
public struct RelationshipDescription: Sendable, Hashable, Codable {
    /// The relationship's name, unique among the entity's properties.
    public var name: String
    /// The entity the relationship points to.
    public var destination: String
    /// The relationship on the destination that points back.
    public var inverse: String
    /// Whether it holds a set of records rather than at most one.
    public var isToMany: Bool
    /// Whether a record may leave it empty.
    public var isOptional: Bool
    /// What deleting the source record does to the records it points to.
    public var deleteRule: DeleteRule

    /// A relationship to `destination`, whose inverse there is `inverse`.
    public init(
        _ name: String,
        to destination: String,
        inverse: String,
        isToMany: Bool = false,
        isOptional: Bool = true,
        deleteRule: DeleteRule = .nullify
    ) {
        self.name = name
        self.destination = destination
        self.inverse = inverse
        self.isToMany = isToMany
        self.isOptional = isOptional
        self.deleteRule = deleteRule
    }
}

/// One kind of record: its attributes and relationships.
public struct EntityDescription: Sendable, Hashable, Codable {
    /// The entity's name, unique in the schema.
    public var name: String
    /// Its attributes.
    public var attributes: [AttributeDescription]
    /// Its relationships.
    public var relationships: [RelationshipDescription]

    /// An entity.
    public init(_ name: String, attributes: [AttributeDescription] = [], relationships: [RelationshipDescription] = [])
    {
        self.name = name
        self.attributes = attributes
        self.relationships = relationships
    }

    /// The attribute named `name`.
    public func attribute(_ name: String) -> AttributeDescription? { attributes.first { $0.name == name } }
    /// The relationship named `name`.
    public func relationship(_ name: String) -> RelationshipDescription? { relationships.first { $0.name == name } }
}

/// Why a schema is not usable; names the entity and property at fault.
public struct SchemaError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The entity at fault.
    public var entity: String
    /// The property at fault, if one is.
    public var property: String?
    /// What is wrong.
    public var message: String

    /// `Entity.property: message`.
    public var description: String {
        "schema error in \(entity)\(property.map { ".\($0)" } ?? ""): \(message)"
    }
}

/// A versioned set of entities. Every store and every log carries the version it was written
/// with, so a device can tell data from a newer schema.
public struct Schema: Sendable, Hashable, Codable {
    /// Increases whenever the entities change.
    public var version: Int
    /// The entities.
    public var entities: [EntityDescription]

    /// A schema, checked: unique names, relationships whose destinations and inverses exist and
    /// point back, defaults of the attribute's type.
    public init(version: Int, entities: [EntityDescription]) throws(SchemaError) {
        self.version = version
        self.entities = entities
        try validate()
    }

    /// The entity named `name`.
    public func entity(_ name: String) -> EntityDescription? { entities.first { $0.name == name } }

    private enum CodingKeys: String, CodingKey { case version, entities }

    /// Decodes a schema and checks it as ``init(version:entities:)`` does: a schema read from a
    /// file is never trusted.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        try self.init(
            version: container.decode(Int.self, forKey: .version),
            entities: container.decode([EntityDescription].self, forKey: .entities)
        )
    }

    private func validate() throws(SchemaError) {
        var names = Set<String>()
        for entity in entities {
            guard !entity.name.isEmpty else {
                throw SchemaError(entity: entity.name, property: nil, message: "an entity needs a name")
            }
            guard names.insert(entity.name).inserted else {
                throw SchemaError(entity: entity.name, property: nil, message: "two entities have this name")
            }
            var properties = Set<String>()
            for attribute in entity.attributes {
                guard properties.insert(attribute.name).inserted else {
                    throw SchemaError(
                        entity: entity.name,
                        property: attribute.name,
                        message: "two properties have this name"
                    )
                }
                if let value = attribute.defaultValue, value != .null, value.type != attribute.type {
                    throw SchemaError(
                        entity: entity.name,
                        property: attribute.name,
                        message: "the default \(value) is not of type \(attribute.type.rawValue)"
                    )
                }
            }
            for relationship in entity.relationships {
                guard properties.insert(relationship.name).inserted else {
                    throw SchemaError(
                        entity: entity.name,
                        property: relationship.name,
                        message: "two properties have this name"
                    )
                }
            }
        }
        for entity in entities {
            for relationship in entity.relationships {
                guard let destination = self.entity(relationship.destination) else {
                    throw SchemaError(
                        entity: entity.name,
                        property: relationship.name,
                        message: "the destination entity \(relationship.destination) does not exist"
                    )
                }
                guard let inverse = destination.relationship(relationship.inverse) else {
                    throw SchemaError(
                        entity: entity.name,
                        property: relationship.name,
                        message: "the inverse \(destination.name).\(relationship.inverse) does not exist"
                    )
                }
                guard inverse.destination == entity.name, inverse.inverse == relationship.name else {
                    throw SchemaError(
                        entity: entity.name,
                        property: relationship.name,
                        message: "the inverse \(destination.name).\(relationship.inverse) does not point back to it"
                    )
                }
            }
        }
    }
}

extension Schema {
    /// Whether `entity`'s relationship `name` is the side of its pair that carries the truth,
    /// the other side being derived from it: the to-one side of a one-to-many pair; for two
    /// to-one or two to-many sides, the side whose `(entity, relationship)` names order first
    /// (by UTF-8 bytes). The sync layer records and merges owning sides only and lets contexts
    /// derive the rest, so both sides always agree after a merge.
    public func ownsRelationship(entity: String, _ name: String) -> Bool {
        guard let relationship = self.entity(entity)?.relationship(name),
            let inverse = self.entity(relationship.destination)?.relationship(relationship.inverse)
        else { return false }
        if relationship.isToMany != inverse.isToMany { return !relationship.isToMany }
        let mine = Array(entity.utf8) + [0] + Array(name.utf8)
        let theirs = Array(relationship.destination.utf8) + [0] + Array(inverse.name.utf8)
        return mine.lexicographicallyPrecedes(theirs) || mine == theirs
    }
}
