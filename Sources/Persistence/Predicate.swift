import Foundation

/// Which records a fetch returns: a condition on attribute values and relationships that every
/// store evaluates alike (the SQLite store turns it into SQL; the whole-file stores and the
/// context evaluate it in memory with ``matches(_:)``).
///
/// Build one with ``Field``: `Field("title") == "Groceries" && Field("pinned") == true`.
///
/// Semantics, the same in every store: `==` and `!=` treat `null` as a value (`Field("x") ==
/// .null` finds records without one; `!=` a value includes records where it is `null`); the
/// orderings and text matches are false when the record's value is `null`; `&&`, `||` and `!`
/// are two-valued. Strings compare by their UTF-8 bytes; case-insensitive text matches fold
/// ASCII letters only.
public indirect enum RecordPredicate: Sendable, Hashable, Codable {
    /// Every record (`true`) or none (`false`).
    case constant(Bool)
    /// An attribute compared with a value.
    case comparison(key: String, RecordPredicate.Comparison, Value)
    /// An attribute whose value is one of these.
    case among(key: String, [Value])
    /// A string attribute matched against text.
    case text(key: String, RecordPredicate.TextMatch, String, caseInsensitive: Bool)
    /// A to-one relationship pointing at this record (or empty, for `nil`); a to-many one
    /// holding it (or empty, for `nil`).
    case relationship(key: String, ObjectID?)
    /// Records with one of these ids.
    case ids(Set<ObjectID>)
    /// Records whose id orders after this one (for paging through a store in id order).
    case idAfter(ObjectID)
    /// All of these.
    case and([RecordPredicate])
    /// Any of these.
    case or([RecordPredicate])
    /// Not this.
    case not(RecordPredicate)

    /// How an attribute is compared.
    public enum Comparison: String, Sendable, Hashable, Codable {
        /// `==`, `!=`, `<`, `<=`, `>`, `>=`.
        case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual
    }

    /// How text is matched.
    public enum TextMatch: String, Sendable, Hashable, Codable {
        /// Starts with, ends with, contains.
        case beginsWith, endsWith, contains
    }

    /// Whether `record` satisfies the predicate.
    public func matches(_ record: Record) -> Bool {
        switch self {
        case .constant(let value):
            return value
        case .comparison(let key, let comparison, let value):
            let actual = record[key]
            switch comparison {
            case .equal: return actual.compare(to: value) == .orderedSame
            case .notEqual: return actual.compare(to: value) != .orderedSame
            default:
                guard actual != .null, value != .null, let order = actual.compare(to: value) else { return false }
                switch comparison {
                case .less: return order == .orderedAscending
                case .lessOrEqual: return order != .orderedDescending
                case .greater: return order == .orderedDescending
                default: return order != .orderedAscending
                }
            }
        case .among(let key, let values):
            let actual = record[key]
            return values.contains { actual.compare(to: $0) == .orderedSame }
        case .text(let key, let match, let text, let caseInsensitive):
            guard case .string(let actual) = record[key] else { return false }
            let haystack = caseInsensitive ? Self.asciiLowercased(actual) : Array(actual.utf8)
            let needle = caseInsensitive ? Self.asciiLowercased(text) : Array(text.utf8)
            switch match {
            case .beginsWith: return haystack.starts(with: needle)
            case .endsWith: return haystack.reversed().starts(with: needle.reversed())
            case .contains: return needle.isEmpty || Self.find(needle, in: haystack)
            }
        case .relationship(let key, let target):
            if let many = record.toMany[key] {
                return target.map { many.contains($0) } ?? many.isEmpty
            }
            return record.toOne[key] == target
        case .ids(let ids):
            return ids.contains(record.id)
        case .idAfter(let id):
            return id < record.id
        case .and(let predicates):
            return predicates.allSatisfy { $0.matches(record) }
        case .or(let predicates):
            return predicates.contains { $0.matches(record) }
        case .not(let predicate):
            return !predicate.matches(record)
        }
    }

    /// Checks that every key names a property of `entity` and every value fits its attribute.
    public func validate(for entity: EntityDescription) throws(PersistenceError) {
        func attribute(_ key: String) throws(PersistenceError) -> AttributeDescription {
            guard let attribute = entity.attribute(key) else {
                throw PersistenceError(.invalidRequest, "\(entity.name) has no attribute \(key)")
            }
            return attribute
        }
        func check(_ value: Value, _ attribute: AttributeDescription) throws(PersistenceError) {
            guard value.fits(attribute.type) else {
                throw PersistenceError(
                    .invalidRequest,
                    "\(entity.name).\(attribute.name) is \(attribute.type.rawValue); cannot compare it with \(value)"
                )
            }
        }
        switch self {
        case .constant, .ids, .idAfter:
            return
        case .comparison(let key, _, let value):
            try check(value, attribute(key))
        case .among(let key, let values):
            let attribute = try attribute(key)
            for value in values { try check(value, attribute) }
        case .text(let key, _, _, _):
            let attribute = try attribute(key)
            guard attribute.type == .string else {
                throw PersistenceError(.invalidRequest, "\(entity.name).\(key) is not a string attribute")
            }
        case .relationship(let key, let target):
            guard let relationship = entity.relationship(key) else {
                throw PersistenceError(.invalidRequest, "\(entity.name) has no relationship \(key)")
            }
            if let target, target.entity != relationship.destination {
                throw PersistenceError(
                    .invalidRequest,
                    "\(entity.name).\(key) points to \(relationship.destination), not \(target.entity)"
                )
            }
        case .and(let predicates), .or(let predicates):
            for predicate in predicates { try predicate.validate(for: entity) }
        case .not(let predicate):
            try predicate.validate(for: entity)
        }
    }

    static func asciiLowercased(_ text: String) -> [UInt8] {
        text.utf8.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}

/// Names a property in a predicate: `Field("title") == "Groceries"`,
/// `Field("folder").refers(to: inbox)`, `Field("title").contains("milk", caseInsensitive: true)`.
public struct Field: Sendable, Hashable {
    /// The property's name.
    public var name: String
    /// The property named `name`.
    public init(_ name: String) { self.name = name }

    /// Records whose value equals `value` (`.null` finds records without one).
    public static func == (field: Field, value: Value) -> RecordPredicate {
        .comparison(key: field.name, .equal, value)
    }
    /// Records whose value differs from `value` (including those without one).
    public static func != (field: Field, value: Value) -> RecordPredicate {
        .comparison(key: field.name, .notEqual, value)
    }
    /// Records whose value orders before `value`.
    public static func < (field: Field, value: Value) -> RecordPredicate { .comparison(key: field.name, .less, value) }
    /// Records whose value orders before or equals `value`.
    public static func <= (field: Field, value: Value) -> RecordPredicate {
        .comparison(key: field.name, .lessOrEqual, value)
    }
    /// Records whose value orders after `value`.
    public static func > (field: Field, value: Value) -> RecordPredicate {
        .comparison(key: field.name, .greater, value)
    }
    /// Records whose value orders after or equals `value`.
    public static func >= (field: Field, value: Value) -> RecordPredicate {
        .comparison(key: field.name, .greaterOrEqual, value)
    }
    /// Records whose value is one of `values`.
    public func isIn(_ values: [Value]) -> RecordPredicate { .among(key: name, values) }
    /// Records whose string starts with `prefix`.
    public func beginsWith(_ prefix: String, caseInsensitive: Bool = false) -> RecordPredicate {
        .text(key: name, .beginsWith, prefix, caseInsensitive: caseInsensitive)
    }
    /// Records whose string ends with `suffix`.
    public func endsWith(_ suffix: String, caseInsensitive: Bool = false) -> RecordPredicate {
        .text(key: name, .endsWith, suffix, caseInsensitive: caseInsensitive)
    }
    /// Records whose string contains `text`.
    public func contains(_ text: String, caseInsensitive: Bool = false) -> RecordPredicate {
        .text(key: name, .contains, text, caseInsensitive: caseInsensitive)
    }
    /// Records whose relationship points at (to-one) or holds (to-many) `object`; empty for `nil`.
    public func refers(to object: ObjectID?) -> RecordPredicate { .relationship(key: name, object) }
}

extension RecordPredicate {
    /// Both.
    public static func && (lhs: RecordPredicate, rhs: RecordPredicate) -> RecordPredicate {
        switch (lhs, rhs) {
        case (.and(let a), .and(let b)): return .and(a + b)
        case (.and(let a), _): return .and(a + [rhs])
        default: return .and([lhs, rhs])
        }
    }
    /// Either.
    public static func || (lhs: RecordPredicate, rhs: RecordPredicate) -> RecordPredicate {
        switch (lhs, rhs) {
        case (.or(let a), .or(let b)): return .or(a + b)
        case (.or(let a), _): return .or(a + [rhs])
        default: return .or([lhs, rhs])
        }
    }
    /// Not.
    public static prefix func ! (predicate: RecordPredicate) -> RecordPredicate { .not(predicate) }
}
