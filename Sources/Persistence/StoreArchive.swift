// StoreArchive: a `StoreSnapshot` as a self-describing document, the file format shared by the
// whole-file store plugins (JSON, property list). A plugin picks the encoder; the layout is this:
//
//     format          "concord.store"
//     formatVersion   1
//     metadata        { entries: { "<key>": <data>, ... }, schemaVersion: <int>,
//                       storeIdentifier: "<lowercase uuid>" }
//     records         { "<Entity>": [ { "@id": "<lowercase uuid>", "<property>": <value>, ... }, ... ], ... }
//     schema          `Schema`'s Codable form, validated again when read
//
// - `records` has one array per entity of the schema (empty ones included), each sorted by id
//   (the order of `ObjectID`). A record's id is its `"@id"` (`"@id"` is reserved, so an attribute
//   may be called `"id"`).
// - Property values are typed by the schema, so they carry no type tags: string, integer (Int64),
//   double and boolean as themselves; a date as `Date` and data as `Data` (so the encoder's date and
//   data strategies decide how they look); uuid → lowercase string; to-one → the target's
//   lowercase UUID; to-many → an array of the targets' lowercase UUIDs, sorted; `null` and empty
//   relationships → the key is absent (an explicit null reads as absent too). Doubles go through
//   the encoder too, so non-finite ones follow its non-conforming float strategy.
// - Containers are encoded entity by entity and property by property in byte order of the names;
//   encoders that sort keys therefore give equal bytes for equal contents.
//
// Decoding never trusts the document: every failure is a `PersistenceError` (`.notAStore` for a
// document without the marker, `.corruptStore` naming the entity, the property and the id for
// anything else). The few messages that name the document's syntax come from a `Wording` the
// plugin puts in the decoder's `userInfo`.
import Foundation

/// A ``StoreSnapshot`` as a self-describing document, the file format of the whole-file store
/// plugins: a `"format": "concord.store"` marker, a format version, the metadata, the schema,
/// and the records grouped by entity with their values typed by the schema.
///
/// It promises that encoding is deterministic for a given encoder configuration (entities,
/// records and properties are always encoded in the same order, so key-sorting encoders give
/// equal bytes for equal contents), that every value the schema allows round-trips as far as
/// the encoder's strategies for `Date`, `Data` and non-finite `Double`s allow, and that decoding
/// throws only ``PersistenceError``s: ``PersistenceError/Code/notAStore`` for a document that is
/// not a Concord store, ``PersistenceError/Code/corruptStore`` (naming the entity, property and
/// id) for one that is damaged. Errors thrown while encoding are
/// ``PersistenceError/Code/invalidRequest`` (a record of an entity the schema lacks, a value of
/// the wrong type).
public struct StoreArchive: Codable, Sendable {
    /// The value of the document's `format` key: `"concord.store"`.
    public static let formatMarker = "concord.store"
    /// The format version this type writes and the only one it reads: 1.
    public static let formatVersion = 1
    /// The key of a record's id in its container: `"@id"` (reserved, never a property name).
    public static let idKey = "@id"
    /// The `userInfo` key under which a decoder may hold the ``Wording`` for its syntax.
    public static let wordingKey = CodingUserInfoKey(rawValue: "concord.storeArchive.wording")!

    /// The snapshot the document holds.
    public var snapshot: StoreSnapshot

    /// The document for `snapshot`.
    public init(snapshot: StoreSnapshot) { self.snapshot = snapshot }

    // MARK: Hooks

    /// The messages that name the document's syntax ("JSON", "a property list"), for errors a
    /// decoder of that syntax raises.
    public struct Wording: Sendable {
        /// The message when the document's root is not a keyed container (a JSON object, a
        /// dictionary); thrown as ``PersistenceError/Code/notAStore``.
        public var rootNotKeyed: String
        /// The message when the root lacks the `format` marker; thrown as
        /// ``PersistenceError/Code/notAStore``.
        public var withoutMarker: String
        /// What ``describe(_:)`` says for data the decoder cannot parse at all.
        public var unparsable: String

        /// A wording made of the three messages.
        public init(rootNotKeyed: String, withoutMarker: String, unparsable: String) {
            self.rootNotKeyed = rootNotKeyed
            self.withoutMarker = withoutMarker
            self.unparsable = unparsable
        }

        /// The wording used when a decoder's `userInfo` holds none: it names no syntax.
        public static let neutral = Wording(
            rootNotKeyed: "the file's root is not a keyed container, so not a Concord store",
            withoutMarker:
                "the file lacks the \"format\": \"\(StoreArchive.formatMarker)\" marker, so not a Concord store",
            unparsable: "the file cannot be parsed (damaged, truncated or empty)"
        )

        /// A decoding error in words, without Foundation's boilerplate: where it happened and
        /// what was wrong; data that cannot be parsed at all is ``unparsable``. Other errors are
        /// described as they describe themselves.
        public func describe(_ error: any Error) -> String {
            guard let error = error as? DecodingError else { return "\(error)" }
            func path(_ context: DecodingError.Context) -> String {
                context.codingPath.isEmpty
                    ? ""
                    : " at "
                        + context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(
                            separator: "."
                        )
            }
            switch error {
            case .dataCorrupted(let context):
                if context.codingPath.isEmpty { return unparsable }
                return "\(context.debugDescription)\(path(context))"
            case .keyNotFound(let key, let context): return "\(key.stringValue) is missing\(path(context))"
            case .typeMismatch(let type, let context):
                return "expected \(type)\(path(context)): \(context.debugDescription)"
            case .valueNotFound(let type, let context): return "expected \(type), found null\(path(context))"
            @unknown default: return "\(error)"
            }
        }
    }

    /// How one property of an entity is written.
    public enum PropertyKind: Sendable, Hashable {
        /// An attribute of the type; its value is written as ``Value`` of that type.
        case attribute(AttributeType)
        /// A to-one relationship to the entity; written as the target's lowercase UUID.
        case toOne(destination: String)
        /// A to-many relationship to the entity; written as the targets' lowercase UUIDs, sorted.
        case toMany(destination: String)
    }

    /// A property value as the document holds it, typed by the schema.
    public enum ArchivedValue: Sendable, Hashable {
        /// A string attribute, a uuid attribute (lowercase) or a to-one target (lowercase UUID).
        case string(String)
        /// An integer attribute.
        case integer(Int64)
        /// A double attribute (an integer given to a double attribute is the double it means).
        case double(Double)
        /// A boolean attribute.
        case boolean(Bool)
        /// A date attribute.
        case date(Date)
        /// A data attribute.
        case data(Data)
        /// A non-empty to-many relationship: the targets' lowercase UUIDs, sorted.
        case strings([String])
    }

    /// An entity's properties, by name and in the order they are written (byte order of the
    /// names).
    public struct Plan: Sendable {
        /// Every attribute and relationship, in byte order of the names.
        public let properties: [(name: String, kind: PropertyKind)]
        private let kinds: [String: PropertyKind]

        /// The plan for `entity`.
        public init(_ entity: EntityDescription) {
            var kinds: [String: PropertyKind] = [:]
            for attribute in entity.attributes { kinds[attribute.name] = .attribute(attribute.type) }
            for relationship in entity.relationships {
                kinds[relationship.name] =
                    relationship.isToMany
                    ? .toMany(destination: relationship.destination) : .toOne(destination: relationship.destination)
            }
            self.kinds = kinds
            properties = kinds.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.map { ($0, kinds[$0]!) }
        }

        /// The kind of the property called `name`, or nil when the entity has none.
        public func kind(of name: String) -> PropertyKind? { kinds[name] }

        /// Calls `body` with each property of `record` the document holds (not its id), in the
        /// order of ``properties``: `null` values and empty relationships are skipped. Throws
        /// ``PersistenceError/Code/invalidRequest`` for a value whose type is not the attribute's.
        public func forEachValue(of record: Record, _ body: (String, ArchivedValue) throws -> Void) throws {
            for (name, kind) in properties {
                switch kind {
                case .attribute(let type):
                    guard let value = record.values[name] else { continue }
                    switch (value, type) {
                    case (.null, _): continue
                    case (.string(let string), .string): try body(name, .string(string))
                    case (.integer(let integer), .integer): try body(name, .integer(integer))
                    case (.double(let double), .double): try body(name, .double(double))
                    // An update may put an integer in a double attribute; it is kept as the double it means.
                    case (.integer(let integer), .double): try body(name, .double(Double(integer)))
                    case (.boolean(let boolean), .boolean): try body(name, .boolean(boolean))
                    case (.date(let date), .date): try body(name, .date(date))
                    case (.data(let data), .data): try body(name, .data(data))
                    case (.uuid(let uuid), .uuid): try body(name, .string(uuid.lowercaseText))
                    default:
                        throw PersistenceError(
                            .invalidRequest,
                            "cannot write \(record.id).\(name): \(value) is not \(type.rawValue)"
                        )
                    }
                case .toOne:
                    if let target = record.toOne[name] { try body(name, .string(target.uuid.lowercaseText)) }
                case .toMany:
                    if let targets = record.toMany[name], !targets.isEmpty {
                        try body(name, .strings(targets.sorted().map { $0.uuid.lowercaseText }))
                    }
                }
            }
        }
    }

    /// The snapshot's records grouped by entity: one group per entity of the schema (empty ones
    /// included), entities in byte order of their names, records in id order. Throws
    /// ``PersistenceError/Code/invalidRequest`` for a record of an entity the schema lacks.
    public func recordGroups() throws -> [(entity: EntityDescription, records: ArraySlice<Record>)] {
        // Records sorted by entity, then id: each entity's records are one contiguous run.
        let sorted = snapshot.sortedRecords
        var start = 0
        var groups: [(entity: EntityDescription, records: ArraySlice<Record>)] = []
        for entity in snapshot.schema.entities.sorted(by: { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }) {
            if start < sorted.count, sorted[start].id.entity.utf8.lexicographicallyPrecedes(entity.name.utf8) { break }
            var end = start
            while end < sorted.count, sorted[end].id.entity == entity.name { end += 1 }
            groups.append((entity, sorted[start..<end]))
            start = end
        }
        if start < sorted.count {
            throw PersistenceError(
                .invalidRequest,
                "cannot write \(sorted[start].id): no entity \(sorted[start].id.entity) in the schema"
            )
        }
        return groups
    }

    // MARK: Encoding

    private enum Keys: String, CodingKey { case format, formatVersion, metadata, schema, records }
    private enum MetadataKeys: String, CodingKey { case storeIdentifier, schemaVersion, entries }

    /// A coding key made at run time (entity, property and metadata entry names).
    private struct Key: CodingKey, Hashable {
        var stringValue: String
        var intValue: Int? { nil }
        init(_ string: String) { stringValue = string }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }

        static let id = Key(StoreArchive.idKey)
    }

    /// Encodes the document in the layout above; throws ``PersistenceError/Code/invalidRequest``
    /// for a record of an entity the schema lacks or a value whose type is not its attribute's.
    public func encode(to encoder: any Encoder) throws {
        var file = encoder.container(keyedBy: Keys.self)
        try file.encode(Self.formatMarker, forKey: .format)
        try file.encode(Self.formatVersion, forKey: .formatVersion)

        var metadata = file.nestedContainer(keyedBy: MetadataKeys.self, forKey: .metadata)
        try metadata.encode(snapshot.metadata.storeIdentifier.lowercaseText, forKey: .storeIdentifier)
        try metadata.encode(snapshot.metadata.schemaVersion, forKey: .schemaVersion)
        var entries = metadata.nestedContainer(keyedBy: Key.self, forKey: .entries)
        for key in snapshot.metadata.entries.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            try entries.encode(snapshot.metadata.entries[key]!, forKey: Key(key))
        }

        try file.encode(snapshot.schema, forKey: .schema)

        var records = file.nestedContainer(keyedBy: Key.self, forKey: .records)
        for (entity, group) in try recordGroups() {
            let plan = Plan(entity)
            var list = records.nestedUnkeyedContainer(forKey: Key(entity.name))
            for record in group {
                var object = list.nestedContainer(keyedBy: Key.self)
                try object.encode(record.id.uuid.lowercaseText, forKey: .id)
                try plan.forEachValue(of: record) { name, value in
                    let key = Key(name)
                    switch value {
                    case .string(let string): try object.encode(string, forKey: key)
                    case .integer(let integer): try object.encode(integer, forKey: key)
                    case .double(let double): try object.encode(double, forKey: key)
                    case .boolean(let boolean): try object.encode(boolean, forKey: key)
                    case .date(let date): try object.encode(date, forKey: key)
                    case .data(let data): try object.encode(data, forKey: key)
                    case .strings(let strings): try object.encode(strings, forKey: key)
                    }
                }
            }
        }
    }

    // MARK: Decoding

    /// Decodes a document, reading the ``Wording`` from `decoder.userInfo[StoreArchive.wordingKey]`
    /// (``Wording/neutral`` when absent); throws only ``PersistenceError``s (see the type).
    public init(from decoder: any Decoder) throws {
        let wording = decoder.userInfo[Self.wordingKey] as? Wording ?? .neutral
        func field<T>(_ path: String, _ body: () throws -> T) throws -> T { try Self.field(path, wording, body) }

        let file: KeyedDecodingContainer<Keys>
        do {
            file = try decoder.container(keyedBy: Keys.self)
        } catch {
            throw PersistenceError(.notAStore, wording.rootNotKeyed)
        }
        guard (try? file.decodeIfPresent(String.self, forKey: .format)) == Self.formatMarker else {
            throw PersistenceError(.notAStore, wording.withoutMarker)
        }
        let version = try field("formatVersion") { try file.decode(Int.self, forKey: .formatVersion) }
        guard version == Self.formatVersion else {
            throw PersistenceError(
                .corruptStore,
                "the file has format version \(version); this plugin reads version \(Self.formatVersion)"
            )
        }

        let metadata = try field("metadata") { try file.nestedContainer(keyedBy: MetadataKeys.self, forKey: .metadata) }
        let identifierText = try field("metadata.storeIdentifier") {
            try metadata.decode(String.self, forKey: .storeIdentifier)
        }
        guard let identifier = UUID(uuidString: identifierText) else {
            throw PersistenceError(.corruptStore, "metadata.storeIdentifier \"\(identifierText)\" is not a UUID")
        }
        let schemaVersion = try field("metadata.schemaVersion") {
            try metadata.decode(Int.self, forKey: .schemaVersion)
        }
        var entries: [String: Data] = [:]
        if metadata.contains(.entries) {
            let container = try field("metadata.entries") {
                try metadata.nestedContainer(keyedBy: Key.self, forKey: .entries)
            }
            for key in container.allKeys {
                entries[key.stringValue] = try field("metadata.entries.\(key.stringValue)") {
                    try container.decode(Data.self, forKey: key)
                }
            }
        }

        let schema: Schema
        do {
            schema = try file.decode(Schema.self, forKey: .schema)
        } catch let error as SchemaError {
            throw PersistenceError(.corruptStore, "the file's schema is invalid: \(error)", underlying: error)
        } catch {
            throw PersistenceError(
                .corruptStore,
                "the file's schema cannot be read: \(wording.describe(error))",
                underlying: error
            )
        }
        guard schema.version == schemaVersion else {
            throw PersistenceError(
                .corruptStore,
                "metadata.schemaVersion \(schemaVersion) is not the version of the file's schema (\(schema.version))"
            )
        }

        var records: [ObjectID: Record] = [:]
        let groups = try field("records") { try file.nestedContainer(keyedBy: Key.self, forKey: .records) }
        for entityKey in groups.allKeys {
            guard let entity = schema.entity(entityKey.stringValue) else {
                throw PersistenceError(
                    .corruptStore,
                    "records of entity \(entityKey.stringValue), which the file's schema lacks"
                )
            }
            let plan = Plan(entity)
            var list = try field("records.\(entity.name)") { try groups.nestedUnkeyedContainer(forKey: entityKey) }
            if let count = list.count { records.reserveCapacity(records.count + count) }
            while !list.isAtEnd {
                let index = list.currentIndex
                let object = try field("records.\(entity.name)[\(index)]") {
                    try list.nestedContainer(keyedBy: Key.self)
                }
                let record = try Self.decodeRecord(
                    object,
                    entity: entity.name,
                    index: index,
                    plan: plan,
                    wording: wording
                )
                guard records.updateValue(record, forKey: record.id) == nil else {
                    throw PersistenceError(.corruptStore, "\(record.id) appears twice")
                }
            }
        }
        snapshot = StoreSnapshot(
            metadata: StoreMetadata(storeIdentifier: identifier, schemaVersion: schemaVersion, entries: entries),
            schema: schema,
            records: records
        )
    }

    private static func decodeRecord(
        _ object: KeyedDecodingContainer<Key>,
        entity: String,
        index: Int,
        plan: Plan,
        wording: Wording
    ) throws -> Record {
        let idText = try field("records.\(entity)[\(index)].\(idKey)", wording) {
            try object.decode(String.self, forKey: .id)
        }
        guard let uuid = UUID(uuidString: idText) else {
            throw PersistenceError(
                .corruptStore,
                "record \(index) of \(entity) has the id \"\(idText)\", which is not a UUID"
            )
        }
        var record = Record(id: ObjectID(entity: entity, uuid: uuid))
        for key in object.allKeys where key != .id {
            let name = key.stringValue
            guard let kind = plan.kind(of: name) else {
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
                        throw PersistenceError(
                            .corruptStore,
                            "\(record.id).\(name): the target \"\(text)\" is not a UUID"
                        )
                    }
                    record.toOne[name] = ObjectID(entity: destination, uuid: uuid)
                case .toMany(let destination):
                    let texts = try object.decode([String].self, forKey: key)
                    var targets = Set<ObjectID>()
                    targets.reserveCapacity(texts.count)
                    for text in texts {
                        guard let uuid = UUID(uuidString: text) else {
                            throw PersistenceError(
                                .corruptStore,
                                "\(record.id).\(name): the target \"\(text)\" is not a UUID"
                            )
                        }
                        targets.insert(ObjectID(entity: destination, uuid: uuid))
                    }
                    if !targets.isEmpty { record.toMany[name] = targets }
                }
            } catch let error as PersistenceError {
                throw error
            } catch {
                let expected: String
                switch kind {
                case .attribute(let type): expected = type.rawValue
                case .toOne: expected = "an id"
                case .toMany: expected = "an array of ids"
                }
                throw PersistenceError(
                    .corruptStore,
                    "\(record.id).\(name): the value is not \(expected) (\(wording.describe(error)))",
                    underlying: error
                )
            }
        }
        return record
    }

    /// Runs `body`, turning a decoding error into a `corruptStore` that names `path`.
    private static func field<T>(_ path: String, _ wording: Wording, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.corruptStore, "\(path): \(wording.describe(error))", underlying: error)
        }
    }
}
