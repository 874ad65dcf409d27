// JSONStore: a Concord store kept as one UTF-8 JSON file, read whole and replaced whole.
//
// This file is also a template: it uses only the public API of Persistence, so you can copy it
// to write a store plugin of your own on top of `WholeFileStore`.
//
// File format, version 1 (keys are written sorted, so equal contents give equal bytes):
//
//     {
//       "format": "concord.store",
//       "formatVersion": 1,
//       "metadata": {
//         "entries": { "<key>": "<base64>", ... },
//         "schemaVersion": 3,
//         "storeIdentifier": "<lowercase uuid>"
//       },
//       "records": {
//         "<Entity>": [
//           { "@id": "<lowercase uuid>", "<attribute>": <value>, "<to-one>": "<uuid>",
//             "<to-many>": ["<uuid>", ...] },
//           ...
//         ],
//         ...
//       },
//       "schema": { "version": 3, "entities": [ ... ] }
//     }
//
// - `schema` is `Schema`'s Codable form; it is validated again when read.
// - `records` has one array per entity of the schema (empty ones included), each sorted by id
//   (the order of `ObjectID`: the UUID's bytes, which is also the order of the lowercase hex).
//   A record's id is its `"@id"` (so an attribute may be called `"id"`; `"@id"` is reserved).
// - Property values are typed by the schema, so they carry no type tags: string → string;
//   integer → integer (all of Int64, exactly); double → number in the shortest form that
//   reads back to the same bits (`1.0` is written `1`, `-0.0` is `-0`), and NaN, +∞, −∞, which
//   JSON cannot hold, as the strings `"NaN"`, `"Infinity"`, `"-Infinity"` (a NaN's payload
//   and sign are not kept); boolean → `true`/`false`; date → its `timeIntervalSinceReferenceDate`
//   as a number (round-trips exactly); data → base64; uuid → lowercase string; to-one → the
//   target's UUID; to-many → the targets' UUIDs, sorted; `null` and empty relationships →
//   the key is absent (an explicit JSON `null` reads as absent too).
//
// Reading never trusts the file: anything that is not JSON (garbage, a truncated file, an empty
// file) is `PersistenceError.Code.corruptStore`; JSON without the `"format": "concord.store"`
// marker, or a property list, is `.notAStore`; a value of the wrong type, an id that is not a
// UUID, a duplicate id, a record of an entity or a property the file's schema lacks, or an
// invalid schema is `.corruptStore` naming the entity, the property and the id. JSON nested
// deeper than the parser's limit (512) is rejected by the parser, never by a crash.
import Foundation
import Persistence

/// A store kept as one JSON file that is read whole and replaced whole, registered as `"json"`.
///
/// It promises everything ``WholeFileStore`` promises (atomic, durable commits that re-read
/// other writers' changes first; presenting its file; following moves; tearing down on
/// deletion), and a file format that is deterministic (the same contents give the same bytes),
/// human-readable, and round-trips every value exactly (see the file header for the format).
/// Its files open only as JSON stores: any other file fails with a ``PersistenceError`` that
/// names it.
public final class JSONStore: WholeFileStore, @unchecked Sendable {
    /// `"json"`.
    public override class var storeType: String { "json" }

    /// The file's bytes for `snapshot`: UTF-8 JSON in format version 1, keys sorted.
    public override class func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "Infinity", negativeInfinity: "-Infinity", nan: "NaN")
        encoder.dateEncodingStrategy = .deferredToDate
        encoder.dataEncodingStrategy = .base64
        do {
            return try encoder.encode(JSONStoreFile(snapshot: snapshot))
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.invalidRequest, "cannot encode the store as JSON: \(error)", underlying: error)
        }
    }

    /// The snapshot `data` holds; throws ``PersistenceError`` naming `url` (``PersistenceError/Code/corruptStore``
    /// or ``PersistenceError/Code/notAStore``) for anything that is not a JSON store of format
    /// version 1.
    public override class func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot {
        if let kind = JSONStoreFile.propertyListKind(of: data) {
            throw PersistenceError(.notAStore, "the file is a \(kind) property list, not a JSON store", url: url)
        }
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(
            positiveInfinity: "Infinity", negativeInfinity: "-Infinity", nan: "NaN")
        decoder.dateDecodingStrategy = .deferredToDate
        decoder.dataDecodingStrategy = .base64
        do {
            return try decoder.decode(JSONStoreFile.self, from: data).snapshot
        } catch var error as PersistenceError {
            error.url = url
            throw error
        } catch let error as DecodingError {
            throw PersistenceError(.corruptStore, JSONStoreFile.describe(error), url: url, underlying: error)
        } catch {
            throw PersistenceError(.corruptStore, "the file cannot be read as JSON: \(error)", url: url, underlying: error)
        }
    }
}

// MARK: - The file format

/// A coding key made at run time (entity, property and metadata entry names).
private struct JSONStoreKey: CodingKey, Hashable {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// The whole file: what `JSONStore` encodes and decodes.
private struct JSONStoreFile: Codable {
    static let marker = "concord.store"
    static let version = 1
    static let idKey = JSONStoreKey("@id")

    enum Keys: String, CodingKey { case format, formatVersion, metadata, schema, records }
    enum MetadataKeys: String, CodingKey { case storeIdentifier, schemaVersion, entries }

    var snapshot: StoreSnapshot

    init(snapshot: StoreSnapshot) { self.snapshot = snapshot }

    /// How one property of an entity is written.
    enum PropertyKind {
        case attribute(AttributeType)
        case toOne(destination: String)
        case toMany(destination: String)
    }

    /// An entity's properties, by name and in the order they are written.
    struct Plan {
        var ordered: [(key: JSONStoreKey, kind: PropertyKind)]
        var byName: [String: PropertyKind]

        init(_ entity: EntityDescription) {
            var byName: [String: PropertyKind] = [:]
            for attribute in entity.attributes { byName[attribute.name] = .attribute(attribute.type) }
            for relationship in entity.relationships {
                byName[relationship.name] = relationship.isToMany
                    ? .toMany(destination: relationship.destination) : .toOne(destination: relationship.destination)
            }
            self.byName = byName
            ordered = byName.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.map { (JSONStoreKey($0), byName[$0]!) }
        }
    }

    // MARK: Encoding

    func encode(to encoder: any Encoder) throws {
        var file = encoder.container(keyedBy: Keys.self)
        try file.encode(Self.marker, forKey: .format)
        try file.encode(Self.version, forKey: .formatVersion)

        var metadata = file.nestedContainer(keyedBy: MetadataKeys.self, forKey: .metadata)
        try metadata.encode(snapshot.metadata.storeIdentifier.uuidString.lowercased(), forKey: .storeIdentifier)
        try metadata.encode(snapshot.metadata.schemaVersion, forKey: .schemaVersion)
        var entries = metadata.nestedContainer(keyedBy: JSONStoreKey.self, forKey: .entries)
        for key in snapshot.metadata.entries.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            try entries.encode(snapshot.metadata.entries[key]!, forKey: JSONStoreKey(key))
        }

        try file.encode(snapshot.schema, forKey: .schema)

        // Records sorted by entity, then id: each entity's records are one contiguous run.
        let sorted = snapshot.sortedRecords
        var start = 0
        var records = file.nestedContainer(keyedBy: JSONStoreKey.self, forKey: .records)
        let entities = snapshot.schema.entities.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        for entity in entities {
            while start < sorted.count, sorted[start].id.entity.utf8.lexicographicallyPrecedes(entity.name.utf8) {
                throw PersistenceError(.invalidRequest, "cannot write \(sorted[start].id): no entity \(sorted[start].id.entity) in the schema")
            }
            var end = start
            while end < sorted.count, sorted[end].id.entity == entity.name { end += 1 }
            let plan = Plan(entity)
            var list = records.nestedUnkeyedContainer(forKey: JSONStoreKey(entity.name))
            for record in sorted[start..<end] {
                var object = list.nestedContainer(keyedBy: JSONStoreKey.self)
                try Self.encode(record, plan: plan, into: &object)
            }
            start = end
        }
        if start < sorted.count {
            throw PersistenceError(.invalidRequest, "cannot write \(sorted[start].id): no entity \(sorted[start].id.entity) in the schema")
        }
    }

    static func encode(_ record: Record, plan: Plan, into object: inout KeyedEncodingContainer<JSONStoreKey>) throws {
        try object.encode(record.id.uuid.uuidString.lowercased(), forKey: idKey)
        for (key, kind) in plan.ordered {
            switch kind {
            case .attribute(let type):
                guard let value = record.values[key.stringValue] else { continue }
                switch (value, type) {
                case (.null, _): continue
                case (.string(let string), .string): try object.encode(string, forKey: key)
                case (.integer(let integer), .integer): try object.encode(integer, forKey: key)
                case (.double(let double), .double): try object.encode(double, forKey: key)
                // An update may put an integer in a double attribute; it is kept as the double it means.
                case (.integer(let integer), .double): try object.encode(Double(integer), forKey: key)
                case (.boolean(let boolean), .boolean): try object.encode(boolean, forKey: key)
                case (.date(let date), .date): try object.encode(date, forKey: key)
                case (.data(let data), .data): try object.encode(data, forKey: key)
                case (.uuid(let uuid), .uuid): try object.encode(uuid.uuidString.lowercased(), forKey: key)
                default:
                    throw PersistenceError(
                        .invalidRequest, "cannot write \(record.id).\(key.stringValue): \(value) is not \(type.rawValue)")
                }
            case .toOne:
                if let target = record.toOne[key.stringValue] {
                    try object.encode(target.uuid.uuidString.lowercased(), forKey: key)
                }
            case .toMany:
                if let targets = record.toMany[key.stringValue], !targets.isEmpty {
                    try object.encode(targets.sorted().map { $0.uuid.uuidString.lowercased() }, forKey: key)
                }
            }
        }
    }

    // MARK: Decoding

    init(from decoder: any Decoder) throws {
        let file: KeyedDecodingContainer<Keys>
        do {
            file = try decoder.container(keyedBy: Keys.self)
        } catch {
            throw PersistenceError(.notAStore, "the file is JSON but not an object, so not a Concord store")
        }
        guard (try? file.decodeIfPresent(String.self, forKey: .format)) == Self.marker else {
            throw PersistenceError(.notAStore, "the file is JSON without the \"format\": \"\(Self.marker)\" marker, so not a Concord store")
        }
        let version = try Self.field("formatVersion") { try file.decode(Int.self, forKey: .formatVersion) }
        guard version == Self.version else {
            throw PersistenceError(.corruptStore, "the file has format version \(version); this plugin reads version \(Self.version)")
        }

        let metadata = try Self.field("metadata") { try file.nestedContainer(keyedBy: MetadataKeys.self, forKey: .metadata) }
        let identifierText = try Self.field("metadata.storeIdentifier") { try metadata.decode(String.self, forKey: .storeIdentifier) }
        guard let identifier = UUID(uuidString: identifierText) else {
            throw PersistenceError(.corruptStore, "metadata.storeIdentifier \"\(identifierText)\" is not a UUID")
        }
        let schemaVersion = try Self.field("metadata.schemaVersion") { try metadata.decode(Int.self, forKey: .schemaVersion) }
        var entries: [String: Data] = [:]
        if metadata.contains(.entries) {
            let container = try Self.field("metadata.entries") { try metadata.nestedContainer(keyedBy: JSONStoreKey.self, forKey: .entries) }
            for key in container.allKeys {
                entries[key.stringValue] = try Self.field("metadata.entries.\(key.stringValue)") { try container.decode(Data.self, forKey: key) }
            }
        }

        let schema: Schema
        do {
            schema = try file.decode(Schema.self, forKey: .schema)
        } catch let error as SchemaError {
            throw PersistenceError(.corruptStore, "the file's schema is invalid: \(error)", underlying: error)
        } catch {
            throw PersistenceError(.corruptStore, "the file's schema cannot be read: \(Self.describe(error))", underlying: error)
        }
        guard schema.version == schemaVersion else {
            throw PersistenceError(
                .corruptStore, "metadata.schemaVersion \(schemaVersion) is not the version of the file's schema (\(schema.version))")
        }

        var records: [ObjectID: Record] = [:]
        let groups = try Self.field("records") { try file.nestedContainer(keyedBy: JSONStoreKey.self, forKey: .records) }
        for entityKey in groups.allKeys {
            guard let entity = schema.entity(entityKey.stringValue) else {
                throw PersistenceError(.corruptStore, "records of entity \(entityKey.stringValue), which the file's schema lacks")
            }
            let plan = Plan(entity)
            var list = try Self.field("records.\(entity.name)") { try groups.nestedUnkeyedContainer(forKey: entityKey) }
            if let count = list.count { records.reserveCapacity(records.count + count) }
            while !list.isAtEnd {
                let index = list.currentIndex
                let object = try Self.field("records.\(entity.name)[\(index)]") { try list.nestedContainer(keyedBy: JSONStoreKey.self) }
                let record = try Self.decodeRecord(object, entity: entity.name, index: index, plan: plan)
                guard records.updateValue(record, forKey: record.id) == nil else {
                    throw PersistenceError(.corruptStore, "\(record.id) appears twice")
                }
            }
        }
        snapshot = StoreSnapshot(
            metadata: StoreMetadata(storeIdentifier: identifier, schemaVersion: schemaVersion, entries: entries),
            schema: schema, records: records)
    }

    static func decodeRecord(
        _ object: KeyedDecodingContainer<JSONStoreKey>, entity: String, index: Int, plan: Plan
    ) throws -> Record {
        let idText = try field("records.\(entity)[\(index)].@id") { try object.decode(String.self, forKey: idKey) }
        guard let uuid = UUID(uuidString: idText) else {
            throw PersistenceError(.corruptStore, "record \(index) of \(entity) has the id \"\(idText)\", which is not a UUID")
        }
        var record = Record(id: ObjectID(entity: entity, uuid: uuid))
        for key in object.allKeys where key != idKey {
            let name = key.stringValue
            guard let kind = plan.byName[name] else {
                throw PersistenceError(.corruptStore, "\(record.id) has a property \(name) that \(entity) lacks")
            }
            do {
                if try object.decodeNil(forKey: key) { continue }
                switch kind {
                case .attribute(let type):
                    let value: Value
                    switch type {
                    case .string: value = .string(try object.decode(String.self, forKey: key))
                    case .integer: value = .integer(try object.decode(Int64.self, forKey: key))
                    case .double: value = .double(try object.decode(Double.self, forKey: key))
                    case .boolean: value = .boolean(try object.decode(Bool.self, forKey: key))
                    case .date: value = .date(try object.decode(Date.self, forKey: key))
                    case .data: value = .data(try object.decode(Data.self, forKey: key))
                    case .uuid:
                        let text = try object.decode(String.self, forKey: key)
                        guard let uuid = UUID(uuidString: text) else {
                            throw PersistenceError(.corruptStore, "\(record.id).\(name): \"\(text)\" is not a UUID")
                        }
                        value = .uuid(uuid)
                    }
                    record.values[name] = value
                case .toOne(let destination):
                    let text = try object.decode(String.self, forKey: key)
                    guard let uuid = UUID(uuidString: text) else {
                        throw PersistenceError(.corruptStore, "\(record.id).\(name): the target \"\(text)\" is not a UUID")
                    }
                    record.toOne[name] = ObjectID(entity: destination, uuid: uuid)
                case .toMany(let destination):
                    let texts = try object.decode([String].self, forKey: key)
                    var targets = Set<ObjectID>()
                    targets.reserveCapacity(texts.count)
                    for text in texts {
                        guard let uuid = UUID(uuidString: text) else {
                            throw PersistenceError(.corruptStore, "\(record.id).\(name): the target \"\(text)\" is not a UUID")
                        }
                        targets.insert(ObjectID(entity: destination, uuid: uuid))
                    }
                    if !targets.isEmpty { record.toMany[name] = targets }
                }
            } catch let error as PersistenceError {
                throw error
            } catch {
                throw PersistenceError(.corruptStore, "\(record.id).\(name): \(describeValueError(error, kind: kind))", underlying: error)
            }
        }
        return record
    }

    /// Runs `body`, turning a decoding error into a `corruptStore` that names `path`.
    static func field<T>(_ path: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.corruptStore, "\(path): \(describe(error))", underlying: error)
        }
    }

    static func describeValueError(_ error: any Error, kind: PropertyKind) -> String {
        let expected: String
        switch kind {
        case .attribute(let type): expected = type.rawValue
        case .toOne: expected = "an id"
        case .toMany: expected = "an array of ids"
        }
        return "the value is not \(expected) (\(describe(error)))"
    }

    /// A decoding error in words, without Foundation's boilerplate.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        func path(_ context: DecodingError.Context) -> String {
            context.codingPath.isEmpty ? "" : " at " + context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty {
                return "the file is not valid JSON (damaged, truncated or empty)"
            }
            return "\(context.debugDescription)\(path(context))"
        case .keyNotFound(let key, let context): return "\(key.stringValue) is missing\(path(context))"
        case .typeMismatch(let type, let context): return "expected \(type)\(path(context)): \(context.debugDescription)"
        case .valueNotFound(let type, let context): return "expected \(type), found null\(path(context))"
        @unknown default: return "\(error)"
        }
    }

    /// "binary" or "XML" when `data` starts like a property list.
    static func propertyListKind(of data: Data) -> String? {
        let head = data.prefix(64)
        if head.starts(with: Array("bplist".utf8)) { return "binary" }
        var text = Substring(decoding: head, as: UTF8.self)
        if text.hasPrefix("\u{FEFF}") { text = text.dropFirst() }
        text = text.drop { $0.isWhitespace }
        if text.hasPrefix("<?xml") || text.hasPrefix("<plist") || text.hasPrefix("<!DOCTYPE plist") { return "XML" }
        return nil
    }
}
