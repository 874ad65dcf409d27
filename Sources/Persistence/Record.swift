import Foundation

/// One record's data, as stores keep and logs carry it: attribute values and references to
/// other records by id.
public struct Record: Sendable, Hashable, Codable {
    /// The record's identity.
    public var id: ObjectID
    /// Attribute values by name; a missing attribute is `null`.
    public var values: [String: Value]
    /// To-one relationships by name (`nil` for none).
    public var toOne: [String: ObjectID]
    /// To-many relationships by name.
    public var toMany: [String: Set<ObjectID>]

    /// A record with the given contents.
    public init(
        id: ObjectID,
        values: [String: Value] = [:],
        toOne: [String: ObjectID] = [:],
        toMany: [String: Set<ObjectID>] = [:]
    ) {
        self.id = id
        self.values = values
        self.toOne = toOne
        self.toMany = toMany
    }

    /// A new record of `entity` with each attribute's default value filled in.
    public static func new(_ entity: EntityDescription, id: ObjectID? = nil) -> Record {
        var record = Record(id: id ?? .random(entity: entity.name))
        for attribute in entity.attributes {
            if let value = attribute.defaultValue { record.values[attribute.name] = value }
        }
        return record
    }

    /// The value of `attribute` (`null` if unset).
    public subscript(attribute: String) -> Value {
        get { values[attribute] ?? .null }
        set { values[attribute] = newValue == .null ? nil : newValue }
    }
}

/// One rule one record breaks.
/// What is known of a relationship's target that does not exist.
public enum MissingTargetState: String, Sendable, Hashable {
    /// It was deleted, here or by another device whose deletion arrived. Repair policies act.
    case deleted
    /// Nothing here says it was ever deleted: it has not arrived yet (a sync engine delivers files
    /// in any order). Such a reference waits (``EntityPolicies/pendingReferenceTimeout``) before
    /// repair policies see it, and never fails a save.
    case notArrived
}

/// A rule a record breaks, found by validation: the entity, the record, the property and the rule.
public struct ValidationViolation: Sendable, Hashable, CustomStringConvertible {
    /// What kind of rule.
    public enum Rule: String, Sendable, Hashable {
        /// A required attribute is `null`; a value of the wrong type; a property the entity lacks;
        /// a required relationship that is empty; a relationship to a record of another entity;
        /// a relationship to a record that does not exist.
        case missingRequiredValue, wrongType, unknownProperty, missingRequiredRelationship, wrongDestination,
            missingDestination
    }
    /// The record that breaks it.
    public var object: ObjectID
    /// The property concerned.
    public var property: String
    /// The rule.
    public var rule: Rule
    /// A sentence with the details.
    public var message: String
    /// For ``Rule/missingDestination``: the record that does not exist.
    public var target: ObjectID? = nil
    /// For ``Rule/missingDestination``: whether the target is known to be deleted or has not
    /// arrived (see ``SaveParticipant/state(ofMissing:)``).
    public var targetState: MissingTargetState? = nil

    /// `Entity/uuid.property: rule (message)`.
    public var description: String { "\(object).\(property): \(rule.rawValue) (\(message))" }
}

extension Schema {
    /// Every rule `record` breaks under this schema (empty when it is valid). Relationship
    /// targets are checked for their entity, not for existence: that needs the store.
    public func violations(of record: Record) -> [ValidationViolation] {
        guard let entity = entity(record.id.entity) else {
            return [
                ValidationViolation(
                    object: record.id,
                    property: "",
                    rule: .unknownProperty,
                    message: "no entity \(record.id.entity) in schema version \(version)"
                )
            ]
        }
        var found: [ValidationViolation] = []
        for attribute in entity.attributes {
            let value = record[attribute.name]
            if value == .null {
                if !attribute.isOptional {
                    found.append(
                        .init(
                            object: record.id,
                            property: attribute.name,
                            rule: .missingRequiredValue,
                            message: "required \(attribute.type.rawValue) is missing"
                        )
                    )
                }
            } else if value.type != attribute.type {
                found.append(
                    .init(
                        object: record.id,
                        property: attribute.name,
                        rule: .wrongType,
                        message: "\(value) is not \(attribute.type.rawValue)"
                    )
                )
            }
        }
        for name in record.values.keys.sorted() where entity.attribute(name) == nil {
            found.append(.init(object: record.id, property: name, rule: .unknownProperty, message: "no such attribute"))
        }
        for relationship in entity.relationships {
            // (Only the targets of another entity are sorted, for the order of the list: a
            // folder's 100,000 notes are looked at once each, not sorted on every save.)
            let isEmpty: Bool
            let misdirected: [ObjectID]
            if relationship.isToMany {
                let targets = record.toMany[relationship.name] ?? []
                isEmpty = targets.isEmpty
                misdirected = targets.filter { $0.entity != relationship.destination }.sorted()
            } else {
                let target = record.toOne[relationship.name]
                isEmpty = target == nil
                misdirected = target.map { $0.entity != relationship.destination ? [$0] : [] } ?? []
            }
            if isEmpty && !relationship.isOptional {
                found.append(
                    .init(
                        object: record.id,
                        property: relationship.name,
                        rule: .missingRequiredRelationship,
                        message: "required relationship to \(relationship.destination) is empty"
                    )
                )
            }
            for target in misdirected {
                found.append(
                    .init(
                        object: record.id,
                        property: relationship.name,
                        rule: .wrongDestination,
                        message: "\(target) is not a \(relationship.destination)"
                    )
                )
            }
        }
        for name in Set(record.toOne.keys).union(record.toMany.keys).sorted() where entity.relationship(name) == nil {
            found.append(
                .init(object: record.id, property: name, rule: .unknownProperty, message: "no such relationship")
            )
        }
        return found
    }
}
