import Foundation

/// A Swift type that stands for an entity, so an app works with its own structs instead of
/// ``Record``s: `Codable` does the mapping, guided by the schema.
///
/// ```swift
/// struct Note: Entity {
///     static let entityName = "Note"
///     var id = Note.newID()
///     var title: String
///     var pinned = false
///     var edited: Date?
///     var folder: ObjectID?          // a to-one relationship
/// }
/// try context.insert(Note(title: "Groceries"))
/// let pinned = try context.fetch(Note.self, where: Field("pinned") == true)
/// ```
///
/// Stored properties map by name: `id` is the record's id; a property the entity declares as a
/// relationship holds an `ObjectID?` (to-one) or a `Set<ObjectID>` / `[ObjectID]` (to-many);
/// the others are attributes of a matching type (`String`, any integer type, `Double`,
/// `Float`, `Bool`, `Date`, `Data`, `UUID`, their optionals, and `RawRepresentable` or other
/// single-value `Codable` wrappers of those). A `nil` optional is `null`.
public protocol Entity: Codable, Sendable, Identifiable where ID == ObjectID {
    /// The entity's name in the schema.
    static var entityName: String { get }
}

extension Entity {
    /// A new random id for a record of this entity.
    public static func newID() -> ObjectID { .random(entity: entityName) }

    /// The deterministic id of the record of this entity known by `name` (see
    /// ``ObjectID/deterministic(entity:name:)``).
    public static func id(named name: String) -> ObjectID { .deterministic(entity: entityName, name: name) }

    /// This value as a record of `schema`.
    public func record(in schema: Schema) throws -> Record {
        guard let entity = schema.entity(Self.entityName) else {
            throw PersistenceError(.invalidRequest, "no entity \(Self.entityName) in schema version \(schema.version)")
        }
        let encoder = RecordEncoder(entity: entity, record: Record(id: id))
        do {
            try encode(to: encoder)
        } catch {
            throw PersistenceError(
                .invalidRequest,
                "cannot store this \(Self.self) as a \(entity.name) record: \(error)"
            )
        }
        return encoder.record
    }

    /// The value a record of `schema` holds.
    public init(record: Record, schema: Schema) throws {
        guard let entity = schema.entity(Self.entityName), record.id.entity == Self.entityName else {
            throw PersistenceError(
                .invalidRequest,
                "\(record.id) is not a \(Self.entityName) of schema version \(schema.version)"
            )
        }
        do {
            try self.init(from: RecordDecoder(entity: entity, record: record))
        } catch {
            throw PersistenceError(.invalidRequest, "cannot read \(record.id) as a \(Self.self): \(error)")
        }
    }
}

extension ObjectContext {
    /// Inserts `object` (running the entity's `didInsert` hook) and returns it as inserted.
    @discardableResult
    public func insert<T: Entity>(_ object: T) throws -> T {
        try T(record: insert(object.record(in: coordinator.schema)), schema: coordinator.schema)
    }

    /// Replaces the stored version of `object` with this one (see ``update(_:)-(Record)``).
    public func update<T: Entity>(_ object: T) throws {
        try update(object.record(in: coordinator.schema))
    }

    /// Deletes `object`, applying delete rules.
    public func delete<T: Entity>(_ object: T) throws {
        try delete(object.id)
    }

    /// The object with `id`, or `nil`.
    public func object<T: Entity>(_ type: T.Type, id: ObjectID) throws -> T? {
        try record(with: id).map { try T(record: $0, schema: coordinator.schema) }
    }

    /// The objects of `type` that match `predicate`, in order.
    public func fetch<T: Entity>(
        _ type: T.Type,
        where predicate: RecordPredicate = .constant(true),
        sortedBy sort: [RecordSort] = [],
        limit: Int? = nil,
        offset: Int = 0
    ) throws -> [T] {
        try fetch(
            FetchRequest(entity: T.entityName, predicate: predicate, sortedBy: sort, limit: limit, offset: offset)
        )
        .map { try T(record: $0, schema: coordinator.schema) }
    }
}

// MARK: - Encoding

struct EntityCodingError: Error, CustomStringConvertible {
    var description: String
}

/// Writes an ``Entity`` value into a record, property by property.
final class RecordEncoder: Encoder {
    let entity: EntityDescription
    var record: Record
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] = [:]

    init(entity: EntityDescription, record: Record) {
        self.entity = entity
        self.record = record
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(Keyed<Key>(encoder: self))
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer { fatalError("an entity encodes as a keyed container") }
    func singleValueContainer() -> any SingleValueEncodingContainer {
        fatalError("an entity encodes as a keyed container")
    }

    func set(_ value: some Encodable, for key: String) throws {
        if key == "id" {
            guard let id = value as? ObjectID else {
                throw EntityCodingError(description: "\(entity.name).id must be an ObjectID")
            }
            record.id = id
            return
        }
        if let relationship = entity.relationship(key) {
            if relationship.isToMany {
                if let set = value as? Set<ObjectID> {
                    record.toMany[key] = set.isEmpty ? nil : set
                } else if let array = value as? [ObjectID] {
                    record.toMany[key] = array.isEmpty ? nil : Set(array)
                } else {
                    throw EntityCodingError(
                        description: "\(entity.name).\(key) is to-many: use Set<ObjectID> or [ObjectID]"
                    )
                }
            } else {
                guard let id = value as? ObjectID else {
                    throw EntityCodingError(description: "\(entity.name).\(key) is to-one: use ObjectID?")
                }
                record.toOne[key] = id
            }
            return
        }
        guard let attribute = entity.attribute(key) else {
            throw EntityCodingError(description: "\(entity.name) has no property \(key)")
        }
        record[key] = try Self.value(of: value, as: attribute.type, path: "\(entity.name).\(key)")
    }

    static func value(of value: some Encodable, as type: AttributeType, path: String) throws -> Value {
        let primitive: Value
        switch value {
        case let date as Date: primitive = .date(date)
        case let data as Data: primitive = .data(data)
        case let uuid as UUID: primitive = .uuid(uuid)
        default:
            let capture = ValueCapture()
            try value.encode(to: capture)
            primitive = capture.value
        }
        switch (primitive, type) {
        case (.null, _): return .null
        case (.integer(let integer), .double): return .double(Double(integer))
        case (.string(let text), .uuid):
            guard let uuid = UUID(uuidString: text) else { break }
            return .uuid(uuid)
        default:
            if primitive.type == type { return primitive }
        }
        throw EntityCodingError(description: "\(path) is \(type.rawValue); cannot store \(primitive)")
    }

    struct Keyed<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let encoder: RecordEncoder
        var codingPath: [any CodingKey] { [] }
        mutating func encodeNil(forKey key: Key) throws {
            if encoder.entity.relationship(key.stringValue) != nil {
                encoder.record.toOne[key.stringValue] = nil
                encoder.record.toMany[key.stringValue] = nil
            } else {
                encoder.record[key.stringValue] = .null
            }
        }
        mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
            try encoder.set(value, for: key.stringValue)
        }
        mutating func nestedContainer<NestedKey: CodingKey>(
            keyedBy keyType: NestedKey.Type,
            forKey key: Key
        ) -> KeyedEncodingContainer<NestedKey> {
            fatalError("nested containers are not supported in entities (\(key.stringValue))")
        }
        mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
            fatalError("nested containers are not supported in entities (\(key.stringValue))")
        }
        mutating func superEncoder() -> any Encoder { encoder }
        mutating func superEncoder(forKey key: Key) -> any Encoder { encoder }
    }
}

/// Captures the single primitive a value encodes as (a `RawRepresentable` enum, a wrapper).
final class ValueCapture: Encoder, SingleValueEncodingContainer {
    var value: Value = .null
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] = [:]

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        fatalError("attribute values must encode as a single value")
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        fatalError("attribute values must encode as a single value")
    }
    func singleValueContainer() -> any SingleValueEncodingContainer { self }

    func encodeNil() throws { value = .null }
    func encode(_ value: Bool) throws { self.value = .boolean(value) }
    func encode(_ value: String) throws { self.value = .string(value) }
    func encode(_ value: Double) throws { self.value = .double(value) }
    func encode(_ value: Float) throws { self.value = .double(Double(value)) }
    func encode(_ value: Int) throws { self.value = .integer(Int64(value)) }
    func encode(_ value: Int8) throws { self.value = .integer(Int64(value)) }
    func encode(_ value: Int16) throws { self.value = .integer(Int64(value)) }
    func encode(_ value: Int32) throws { self.value = .integer(Int64(value)) }
    func encode(_ value: Int64) throws { self.value = .integer(value) }
    func encode(_ value: UInt) throws { self.value = .integer(try Self.exact(value)) }
    func encode(_ value: UInt8) throws { self.value = .integer(Int64(value)) }
    func encode(_ value: UInt16) throws { self.value = .integer(Int64(value)) }
    func encode(_ value: UInt32) throws { self.value = .integer(Int64(value)) }
    func encode(_ value: UInt64) throws { self.value = .integer(try Self.exact(value)) }
    func encode<T: Encodable>(_ value: T) throws {
        switch value {
        case let date as Date: self.value = .date(date)
        case let data as Data: self.value = .data(data)
        case let uuid as UUID: self.value = .uuid(uuid)
        default: try value.encode(to: self)
        }
    }

    static func exact(_ value: some BinaryInteger) throws -> Int64 {
        guard let exact = Int64(exactly: value) else {
            throw EntityCodingError(description: "\(value) does not fit a 64-bit integer")
        }
        return exact
    }
}

// MARK: - Decoding

/// Reads an ``Entity`` value out of a record.
struct RecordDecoder: Decoder {
    let entity: EntityDescription
    let record: Record
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(Keyed<Key>(decoder: self))
    }
    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw EntityCodingError(description: "an entity decodes from a keyed container")
    }
    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw EntityCodingError(description: "an entity decodes from a keyed container")
    }

    struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let decoder: RecordDecoder
        var codingPath: [any CodingKey] { [] }
        var allKeys: [Key] {
            (["id"] + decoder.entity.attributes.map(\.name) + decoder.entity.relationships.map(\.name)).compactMap(
                Key.init(stringValue:)
            )
        }
        func contains(_ key: Key) -> Bool { !((try? decodeNil(forKey: key)) ?? true) }

        func decodeNil(forKey key: Key) throws -> Bool {
            let name = key.stringValue
            if name == "id" { return false }
            if let relationship = decoder.entity.relationship(name) {
                return relationship.isToMany ? false : decoder.record.toOne[name] == nil
            }
            return decoder.record[name] == .null
        }

        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            let name = key.stringValue
            let path = "\(decoder.entity.name).\(name)"
            if name == "id", let id = decoder.record.id as? T { return id }
            if let relationship = decoder.entity.relationship(name) {
                if relationship.isToMany {
                    let set = decoder.record.toMany[name] ?? []
                    if let value = set as? T { return value }
                    if let value = set.sorted() as? T { return value }
                    throw EntityCodingError(description: "\(path) is to-many: use Set<ObjectID> or [ObjectID]")
                }
                guard let id = decoder.record.toOne[name] else {
                    throw DecodingError.valueNotFound(
                        T.self,
                        .init(codingPath: [key], debugDescription: "\(path) is empty")
                    )
                }
                if let value = id as? T { return value }
                throw EntityCodingError(description: "\(path) is to-one: use ObjectID?")
            }
            let value = decoder.record[name]
            if value == .null {
                throw DecodingError.valueNotFound(T.self, .init(codingPath: [key], debugDescription: "\(path) is null"))
            }
            return try ValueReader(value: value, path: path).decode(T.self)
        }

        func nestedContainer<NestedKey: CodingKey>(
            keyedBy type: NestedKey.Type,
            forKey key: Key
        ) throws -> KeyedDecodingContainer<NestedKey> {
            throw EntityCodingError(description: "nested containers are not supported in entities (\(key.stringValue))")
        }
        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            throw EntityCodingError(description: "nested containers are not supported in entities (\(key.stringValue))")
        }
        func superDecoder() throws -> any Decoder { decoder }
        func superDecoder(forKey key: Key) throws -> any Decoder { decoder }
    }
}

/// Hands one attribute value to a type that decodes from a single value.
struct ValueReader: Decoder, SingleValueDecodingContainer {
    let value: Value
    let path: String
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        throw mismatch("a keyed value")
    }
    func unkeyedContainer() throws -> any UnkeyedDecodingContainer { throw mismatch("a list") }
    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func mismatch(_ expected: String) -> EntityCodingError {
        EntityCodingError(description: "\(path) holds \(value), not \(expected)")
    }

    func decodeNil() -> Bool { value == .null }
    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .boolean(let flag) = value else { throw mismatch("a boolean") }
        return flag
    }
    func decode(_ type: String.Type) throws -> String {
        switch value {
        case .string(let text): return text
        case .uuid(let uuid): return uuid.uuidString
        default: throw mismatch("a string")
        }
    }
    func decode(_ type: Double.Type) throws -> Double {
        switch value {
        case .double(let number): return number
        case .integer(let number): return Double(number)
        default: throw mismatch("a double")
        }
    }
    func decode(_ type: Float.Type) throws -> Float { Float(try decode(Double.self)) }
    func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        guard case .integer(let number) = value else { throw mismatch("an integer") }
        guard let exact = T(exactly: number) else { throw mismatch("a \(T.self)") }
        return exact
    }
    func decode(_ type: Int.Type) throws -> Int { try integer(Int.self) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(Int8.self) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(Int16.self) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(Int32.self) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(Int64.self) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(UInt.self) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(UInt8.self) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(UInt16.self) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(UInt32.self) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        switch value {
        case .date(let date): if let result = date as? T { return result }
        case .data(let data): if let result = data as? T { return result }
        case .uuid(let uuid): if let result = uuid as? T { return result }
        default: break
        }
        if T.self == Date.self || T.self == Data.self || T.self == UUID.self { throw mismatch("a \(T.self)") }
        return try T(from: self)
    }
}
